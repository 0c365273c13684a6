// Package testsignal carries the ingester's test signals: the points where a test, or the crash
// failpoint of a binary built with the failpoint tag (cmd/ingester), pauses, crashes or watches
// a running ingester. In the style of river's clientTestSignals they are no part of the
// production types — not in ingest.Config, not in service.Deps — no production caller sets
// them, and an ingester without them runs exactly as with empty ones. They travel on the
// context given to ingest.Run, read once when it starts, because the tests that need them live
// in other packages too (internal/harness/check stops PostgreSQL at them); an export_test.go would reach
// only the ingester's own tests.
package testsignal

import "context"

// Ingester are a running ingester's signals; a nil field is no signal. Each runs on the
// ingester's own goroutine — BeforeRecord on its lane's, several at once with Config.Lanes > 1
// — so a signal that blocks holds the ingester (or the lane) there.
type Ingester struct {
	// AfterDBCommit runs between a batch's database commit (every lane's) and its offset commit.
	AfterDBCommit func()
	// BeforeRecord runs inside the batch (or lane) transaction before the record at index of it
	// is applied; index 0 starts a transaction try.
	BeforeRecord func(index int)
	// OnAssigned runs at the start of every consumer-group session, i.e. after every rebalance,
	// with the partitions newly assigned (possibly none).
	OnAssigned func(assigned map[string][]int32)
}

type key struct{}

// With returns ctx carrying s for the ingest.Run it is given to.
func With(ctx context.Context, s Ingester) context.Context { return context.WithValue(ctx, key{}, s) }

// From returns the signals ctx carries; none (the zero Ingester) when it carries none.
func From(ctx context.Context) Ingester {
	s, _ := ctx.Value(key{}).(Ingester)
	return s
}
