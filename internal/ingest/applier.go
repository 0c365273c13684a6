package ingest

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// Applier applies batches of records to PostgreSQL with the ingester's own code for one poll —
// decode and validation (Decode), then insert-first dedup, state changes, audit, anomalies,
// outbox rows and dead letters in one transaction (Apply) — without Kafka: no consumer group,
// no offset commit, no relay, no partition maintenance, so no stale_event bound either (Run sets
// it from the oldest kept processed_event day). `make bench` measures the PostgreSQL ceiling of
// the ingester's work with it (docs/performance.md).
type Applier struct{ in *Ingester }

// Batch is a decoded batch of records, ready for Applier.Apply.
type Batch struct{ items []item }

// NewApplier returns an Applier on pool. Of cfg it reads Providers (required), Group, Topics,
// TransportTimeoutCodes, FirstCheck, PerEventOnly and Lanes (ApplyLanes). Metrics are registered on deps.Registry (a
// fresh registry when nil; registering twice on one registry panics).
func NewApplier(cfg Config, pool *pgxpool.Pool, deps Deps) (*Applier, error) {
	cfg = cfg.withDefaults()
	if cfg.Providers == nil {
		return nil, errors.New("ingest: Providers (capability map) is required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Registry == nil {
		deps.Registry = telemetry.NewRegistry()
	}
	return &Applier{in: newIngester(cfg, deps.Logger, pool, deps.Registry)}, nil
}

// Decode decodes and validates recs (records of cfg.Topics' input topics, in partition order)
// on every core, as the ingester does after each poll.
func (a *Applier) Decode(recs []*kgo.Record) Batch { return Batch{items: a.in.decodeAll(recs)} }

// Apply applies b in one transaction. On error the caller may apply b again: every record is
// deduplicated by eventId, so a transaction that did commit (an ambiguous COMMIT failure) is not
// applied twice.
func (a *Applier) Apply(ctx context.Context, b Batch) error { return a.in.applyItems(ctx, b.items) }

// ApplyLanes applies b as the ingester applies a poll: split into Config.Lanes lanes, each in a
// transaction of its own, at once (docs/design.md#transactions-and-locks). It returns the
// lanes' errors joined; the lanes that committed stand, and b may be applied again as with Apply.
func (a *Applier) ApplyLanes(ctx context.Context, b Batch) error {
	return a.in.runPlan(ctx, a.in.planLanes(ctx, b.items, nil), func(lane []item) error { return a.in.applyItems(ctx, lane) })
}

// ApplyPolls applies polls in order as the ingester applies consecutive polls: each split into
// Config.Lanes lanes as ApplyLanes does, its stored links read while the poll before it is
// applied — here before that poll is applied at all, the stalest such read — so that what the
// poll before writes is joined through that poll's split (docs/design.md#transactions-and-locks).
// It returns the first poll's error (its lanes' errors joined); the polls before it and the lanes
// that committed stand.
func (a *Applier) ApplyPolls(ctx context.Context, polls ...Batch) error {
	apply := func(lane []item) error { return a.in.applyItems(ctx, lane) }
	var plan *lanePlan
	for i, b := range polls {
		if plan == nil {
			plan = a.in.planLanes(ctx, b.items, nil)
		}
		a.in.resolve(ctx, plan)
		var next *lanePlan
		if i+1 < len(polls) {
			next = a.in.planLanes(ctx, polls[i+1].items, plan)
		}
		if err := a.in.runPlan(ctx, plan, apply); err != nil {
			return err
		}
		plan = next
	}
	return nil
}
