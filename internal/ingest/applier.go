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
	return a.in.inLanes(ctx, b.items, func(lane []item) error { return a.in.applyItems(ctx, lane) })
}
