package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consume polls batches of at most MaxPollRecords and handles each (handle) until ctx ends or
// the client closes. While a batch is applied it reads the next one ahead (pollAhead: polled,
// decoded, its stored links read, split into lanes), so that neither the cores nor the database
// wait between batches. Rebalances wait from a poll until the offset commit of the batch in hand
// (BlockRebalanceOnPoll, AllowRebalance); a batch already read ahead then is not held back, so a
// rebalance may run while it is applied and move its partitions. It is applied anyway: their new
// owner reads it again from the committed offset (the batch before it), processed_event absorbs
// whichever of the two applies it second, and this member's later offset commit, refused or
// behind the new owner's, only makes a replay (groupMovedOn). It returns nil once ctx ends or the
// client is closed: handle retries a batch until then, and a batch read ahead is left
// uncommitted.
func (in *Ingester) consume(ctx context.Context) error {
	var ahead *polled
	for {
		b := ahead
		ahead = nil
		if b == nil {
			fetches := in.client.PollRecords(ctx, in.cfg.MaxPollRecords)
			if ctx.Err() != nil || fetches.IsClientClosed() {
				in.client.AllowRebalance()
				return nil
			}
			b = in.polledOf(ctx, fetches, nil)
		}
		if b != nil {
			start := time.Now()
			if b.plan != nil {
				in.resolve(ctx, b.plan) // its reach is what the batch read ahead is split through
			}
			actx, stop := context.WithCancel(ctx)
			next := make(chan *polled, 1)
			go func() { next <- in.pollAhead(ctx, actx, b.plan) }()
			err := in.handle(ctx, b)
			stop()
			ahead = <-next
			if err != nil {
				in.client.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			in.metrics.BatchSeconds.Observe(time.Since(start).Seconds())
		}
		in.client.AllowRebalance()
	}
}

// polled is a batch in hand: its records as polled, control records included (their offsets are
// committed, they are never applied), and its data records decoded and planned into lanes (nil
// when it holds control records only).
type polled struct {
	recs []*kgo.Record
	plan *lanePlan
}

// pollAhead polls the batch after inFlight's while inFlight is applied, until actx ends (the
// batch in hand committed: then an empty poll returns nil at once), and plans it with inFlight as
// the poll in flight (planLanes). The links' read runs on ctx, so a batch polled just before actx
// ends is planned in full.
func (in *Ingester) pollAhead(ctx, actx context.Context, inFlight *lanePlan) *polled {
	fetches := in.client.PollRecords(actx, in.cfg.MaxPollRecords)
	if fetches.IsClientClosed() {
		return nil
	}
	return in.polledOf(ctx, fetches, inFlight)
}

// polledOf is the batch fetches hold (nil when none), its fetch errors logged (a poll ended by
// its context is none), planned with inFlight as the poll in flight.
func (in *Ingester) polledOf(ctx context.Context, fetches kgo.Fetches, inFlight *lanePlan) *polled {
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			in.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		}
	})
	recs := fetches.Records()
	if len(recs) == 0 {
		return nil
	}
	b := &polled{recs: recs}
	// Control records (transaction markers) are no facts: committed, never applied.
	data := recs
	if slices.ContainsFunc(recs, isControl) {
		data = slices.DeleteFunc(slices.Clone(recs), isControl)
	}
	if len(data) > 0 {
		b.plan = in.planLanes(ctx, in.decodeAll(data), inFlight)
	}
	return b
}

// commitTimeout bounds one offset-commit try. franz-go alone retries a commit against an
// unavailable coordinator for up to 30 s; a shorter bound makes the outage visible (pause
// counter, /readyz) within seconds, and the retry continues under handle's backoff.
const commitTimeout = 5 * time.Second

// handle applies a batch (in lanes when Config.Lanes > 1: runPlan) and commits its offsets,
// retrying with backoff while PostgreSQL or Kafka is unavailable; each try of the database work
// is bounded by Config.BatchTimeout, so a hung database pauses the batch too. Once the database
// work has committed only the offset commit is retried, so the batch's transaction is not run
// again (a batch rerun after an ambiguous COMMIT failure is deduplicated record by record). It
// returns nil once the offsets are committed or the group has moved on (groupMovedOn), and ctx's
// error when ctx ends first.
func (in *Ingester) handle(ctx context.Context, batch *polled) error {
	recs := batch.recs
	if batch.plan != nil {
		if err := in.runPlan(ctx, batch.plan, func(lane []item) error { return in.applyRetrying(ctx, lane, len(recs)) }); err != nil {
			return err
		}
	}
	if f := in.signals.AfterDBCommit; f != nil {
		f()
	}
	b := pauseBackoff()
	for {
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		err := in.client.CommitRecords(cctx, recs...)
		cancel()
		switch {
		case err == nil:
			in.paused.Store(nil)
			in.pauseLog.End("batch resumed", "records", len(recs))
			return nil
		case groupMovedOn(err):
			// Retrying would wait on a rejoin that BlockRebalanceOnPoll holds back. The database
			// work stands; whoever owns the partitions next re-reads from the last committed
			// offset and processed_event absorbs the replays.
			in.paused.Store(nil)
			in.pauseLog.End("batch resumed", "records", len(recs))
			in.log.Warn("offset commit refused by the group; replays will be deduplicated", "records", len(recs), "err", err)
			return nil
		}
		// The DB work is committed; only the offsets are retried.
		if err := in.pause(ctx, b, len(recs), fmt.Errorf("ingest: commit offsets: %w", err)); err != nil {
			return err
		}
	}
}

func isControl(r *kgo.Record) bool { return r.Attrs.IsControl() }

// groupMovedOn reports whether an offset commit failed because this member no longer belongs to
// the group generation it consumed in (expired, fenced, or the group rebalancing): the commit can
// never succeed as it is. Every other failure — the coordinator unavailable, a broker error — is
// an outage, retried while the ingester reports itself paused.
func groupMovedOn(err error) bool {
	for _, e := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.FencedInstanceID,
		kerr.RebalanceInProgress, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pauseBackoff is the retry schedule of a paused batch: 100 ms doubling to 5 s, forever.
func pauseBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	b.Reset()
	return b
}

// pause records why the batch in hand failed (metric, /readyz, log — at the pause's start, then
// at most every 30 s with repeats) and waits for the next try.
// It returns ctx's error when ctx ends first.
func (in *Ingester) pause(ctx context.Context, b backoff.BackOff, records int, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	in.metrics.Paused.Inc()
	why := err.Error()
	in.paused.Store(&why)
	wait := b.NextBackOff()
	in.pauseLog.Log("records", records, "retry_in", wait.String(), "err", err)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}
