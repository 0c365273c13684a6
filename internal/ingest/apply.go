package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/processedevent"
)

// writeConfig is what the ingester hands internal/attempt's write path (every call into
// internal/attempt is in this file).
type writeConfig struct {
	acfg  attempt.Config // of every attempt.NewTx
	codes []string       // transport-timeout codes: events.DefaultTransportTimeoutCodes + Config's
}

func newWriteConfig(cfg Config) writeConfig {
	return writeConfig{
		acfg: attempt.Config{Policies: attempt.PoliciesFrom(cfg.Providers), FirstCheck: cfg.FirstCheck,
			ResolutionsTopic: cfg.Topics.Resolutions, EscalationsTopic: cfg.Topics.Escalations},
		codes: append(events.DefaultTransportTimeoutCodes(), cfg.TransportTimeoutCodes...),
	}
}

// batchResult collects what to count once the batch commits.
type batchResult struct {
	effects    []*attempt.Effects
	consumed   map[[2]string]int
	duplicates map[string]int
	collisions int
	mismatches int
	dead       map[[2]string]int
	decisions  map[[2]string]int
}

// applyItems applies a decoded batch (a lane of a poll: applyLanes) in one transaction: the
// set-based path, and on a record the database refuses the savepoint path.
func (in *Ingester) applyItems(ctx context.Context, items []item) error {
	days := map[time.Time]bool{}
	for i := range items {
		if a := items[i].attempt; a != nil {
			days[processedevent.Day(a.OccurredAt)] = true
		}
		if d := items[i].decision; d != nil {
			days[processedevent.Day(d.OccurredAt)] = true
		}
	}
	if err := in.parts.ensure(ctx, days); err != nil {
		return err
	}
	var res batchResult
	fresh := func() {
		res = batchResult{consumed: map[[2]string]int{}, duplicates: map[string]int{}, dead: map[[2]string]int{}, decisions: map[[2]string]int{}}
	}
	var err error
	if !in.cfg.PerEventOnly {
		err = postgres.WithTx(ctx, in.pool, func(tx pgx.Tx) error {
			fresh()
			return in.applyFast(ctx, tx, items, &res)
		})
		if err != nil && ctx.Err() == nil && postgres.IsStatementError(err) {
			in.log.Warn("batch fast path failed on a record; isolating records", "records", len(items), "err", err)
			in.metrics.BatchesRerun.Inc()
			err = errRetryPerEvent
		}
	}
	if in.cfg.PerEventOnly || errors.Is(err, errRetryPerEvent) {
		// One transaction, a savepoint per record: a record that fails for its own reasons is
		// dead-lettered without poisoning its batch.
		err = postgres.WithTx(ctx, in.pool, func(tx pgx.Tx) error {
			fresh()
			for i := range items {
				if f := in.signals.BeforeRecord; f != nil {
					f(i)
				}
				if err := in.applyOne(ctx, tx, &items[i], &res); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	m := in.metrics
	for k, n := range res.consumed {
		m.Consumed.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for t, n := range res.duplicates {
		m.DuplicateDeliveries.WithLabelValues(t).Add(float64(n))
	}
	for k, n := range res.dead {
		m.DeadLetters.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for k, n := range res.decisions {
		m.ManualDecisions.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	m.EventIDCollisions.Add(float64(res.collisions))
	m.KeyMismatches.Add(float64(res.mismatches))
	for _, e := range res.effects {
		m.observe(e)
		for _, d := range e.DecisionsFailed {
			in.log.Error("kept manual decision failed to apply; marked failed, the attempt's own transition committed", d.LogArgs()...)
		}
	}
	return nil
}

var errRetryPerEvent = errors.New("ingest: retry the batch record by record")

// applyFast applies a batch with set-based statements: insert-first dedup of all records at
// once, then every attempt event and manual decision through attempt.Bulk in batch order
// (applied in memory, flushed set-based), without savepoints. Any record-level failure aborts
// the transaction; applyItems then reruns the batch record by record.
func (in *Ingester) applyFast(ctx context.Context, tx pgx.Tx, items []item, res *batchResult) error {
	attIdx, attEv := make([]int, 0, len(items)), make([]processedevent.Event, 0, len(items))
	var decIdx []int
	var decEv []processedevent.Event
	for i := range items {
		it := &items[i]
		switch {
		case it.attempt != nil:
			a := it.attempt
			attIdx = append(attIdx, i)
			attEv = append(attEv, processedevent.Event{TenantID: a.TenantID, EventID: a.EventID, OccurredAt: a.OccurredAt, Hash: it.hash})
		case it.decision != nil:
			d := it.decision
			decIdx = append(decIdx, i)
			decEv = append(decEv, processedevent.Event{TenantID: d.TenantID, EventID: d.EventID, OccurredAt: d.OccurredAt, Hash: it.hash})
		}
	}
	outcome := make([]processedevent.Outcome, len(items))
	for _, g := range []struct {
		store processedevent.Store
		idx   []int
		evs   []processedevent.Event
	}{{in.attempts, attIdx, attEv}, {in.decs, decIdx, decEv}} {
		os, err := g.store.InsertMany(ctx, tx, g.evs)
		if err != nil {
			return err
		}
		for j, o := range os {
			outcome[g.idx[j]] = o
		}
	}
	applied := make([]events.Attempt, 0, len(attIdx))
	var decided []events.Decision
	for i := range items {
		if outcome[i] != processedevent.Applied {
			continue
		}
		if a := items[i].attempt; a != nil {
			applied = append(applied, *a)
		}
		if d := items[i].decision; d != nil {
			decided = append(decided, *d)
		}
	}
	at := attempt.NewTx(tx, &in.acfg)
	bulk, err := at.NewBulk(ctx, applied, decided, in.codes)
	if err != nil {
		return err
	}
	for i := range items {
		if f := in.signals.BeforeRecord; f != nil {
			f(i)
		}
		it := &items[i]
		mtopic := in.metricTopic(it.rec.Topic)
		switch {
		case it.invalid != nil:
			res.consumed[[2]string{mtopic, "invalid"}]++
			if err := in.deadLetter(ctx, tx, it.rec, string(it.invalid.Reason), it.invalid.Detail, res); err != nil {
				return err
			}
		case it.decision != nil:
			d := it.decision
			res.consumed[[2]string{mtopic, string(d.EventType)}]++
			if !in.dedupOutcome(outcome[i], mtopic, d.EventID, res) {
				continue
			}
			o, err := bulk.ApplyDecision(ctx, *d)
			if err != nil {
				return err
			}
			res.decisions[[2]string{d.Decision, o}]++
		default:
			a := it.attempt
			in.countAttempt(it, mtopic, res)
			if !in.dedupOutcome(outcome[i], mtopic, a.EventID, res) {
				continue
			}
			if err := bulk.Apply(ctx, *a, it.digests); err != nil {
				return err
			}
		}
	}
	if err := bulk.Flush(ctx); err != nil {
		return err
	}
	res.effects = append(res.effects, &at.Effects)
	return nil
}

// applyOne processes one record under a savepoint. A failure caused by the record's own data
// rolls back to the savepoint and dead-letters it; any other failure aborts the batch.
func (in *Ingester) applyOne(ctx context.Context, tx pgx.Tx, it *item, res *batchResult) error {
	topic := it.rec.Topic
	if it.invalid != nil {
		res.consumed[[2]string{in.metricTopic(topic), "invalid"}]++
		return in.deadLetter(ctx, tx, it.rec, string(it.invalid.Reason), it.invalid.Detail, res)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("ingest: savepoint: %w", err)
	}
	eff, err := in.applyValid(ctx, sp, it, res)
	if err == nil {
		if err = sp.Commit(ctx); err == nil {
			if eff != nil {
				res.effects = append(res.effects, eff)
			}
			return nil
		}
	}
	_ = sp.Rollback(ctx)
	if !postgres.IsDataError(err) { // the database's condition, not the record's: the batch is retried
		return err
	}
	in.log.Error("record failed; dead-lettered", "topic", topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "err", err)
	return in.deadLetter(ctx, tx, it.rec, ReasonProcessingFailed, "sqlstate "+postgres.SQLState(err), res)
}

func (in *Ingester) metricTopic(topic string) string {
	if topic == in.cfg.Topics.Decisions {
		return events.TopicManualDecisions
	}
	return events.TopicAttempts
}

func (in *Ingester) applyValid(ctx context.Context, tx pgx.Tx, it *item, res *batchResult) (*attempt.Effects, error) {
	mtopic := in.metricTopic(it.rec.Topic)
	if d := it.decision; d != nil {
		res.consumed[[2]string{mtopic, string(d.EventType)}]++
		o, err := in.decs.Insert(ctx, tx, processedevent.Event{TenantID: d.TenantID, EventID: d.EventID, OccurredAt: d.OccurredAt, Hash: it.hash})
		if err != nil || !in.dedupOutcome(o, mtopic, d.EventID, res) {
			return nil, err
		}
		at := attempt.NewTx(tx, &in.acfg)
		outcome, err := at.ApplyDecision(ctx, *d)
		if err != nil {
			return nil, err
		}
		res.decisions[[2]string{d.Decision, outcome}]++
		return &at.Effects, nil
	}
	a := it.attempt
	in.countAttempt(it, mtopic, res)
	o, err := in.attempts.Insert(ctx, tx, processedevent.Event{TenantID: a.TenantID, EventID: a.EventID, OccurredAt: a.OccurredAt, Hash: it.hash})
	if err != nil || !in.dedupOutcome(o, mtopic, a.EventID, res) {
		return nil, err
	}
	at := attempt.NewTx(tx, &in.acfg)
	if _, err := at.ApplyEvent(ctx, *a, in.codes); err != nil {
		return nil, err
	}
	return &at.Effects, nil
}

// countAttempt counts a valid attempt record, and a Kafka key that differs from its
// bookingIntentId (processed normally, counted and logged: docs/design.md#contract-v1).
func (in *Ingester) countAttempt(it *item, mtopic string, res *batchResult) {
	a := it.attempt
	res.consumed[[2]string{mtopic, string(a.EventType)}]++
	if it.rec.Key != nil && string(it.rec.Key) != a.BookingIntentID {
		res.mismatches++
		in.log.Warn("record key differs from bookingIntentId", "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "event_id", a.EventID)
	}
}

func (in *Ingester) dedupOutcome(o processedevent.Outcome, topic, eventID string, res *batchResult) bool {
	switch o {
	case processedevent.Duplicate:
		res.duplicates[topic]++
		return false
	case processedevent.Collision:
		res.collisions++
		in.log.Warn("eventId reused with different content; not applied", "topic", topic, "event_id", eventID)
		return false
	}
	return true
}

// storedLinks reads what items' records reach through stored rows (attempt.ReadLinks: one
// unlocked statement) as links for the lanes' split (linkIdentities).
func (in *Ingester) storedLinks(ctx context.Context, items []item) (map[identity][]identity, error) {
	evs := make([]*events.Attempt, 0, len(items))
	var decs []*events.Decision
	for i := range items {
		if a := items[i].attempt; a != nil {
			evs = append(evs, a)
		}
		if d := items[i].decision; d != nil {
			decs = append(decs, d)
		}
	}
	l, err := attempt.ReadLinks(ctx, in.pool, evs, decs)
	if err != nil {
		return nil, err
	}
	return linkIdentities(l), nil
}

// linkIdentities are l as the lanes' split joins on them, closed: a key's identity links to its
// stored attempt's intent, to its kept decisions' references and to those references' holders'
// intents; a reference's to its holders' intents.
func linkIdentities(l attempt.Links) map[identity][]identity {
	out := make(map[identity][]identity, len(l.KeyIntents)+len(l.KeptRefs)+len(l.Holders))
	holders := func(ref string) []identity {
		var ids []identity
		for _, h := range l.Holders[ref] {
			ids = append(ids, identityOf('i', h[0], h[1]))
		}
		return ids
	}
	for ref := range l.Holders {
		out[refIdentity(ref)] = holders(ref)
	}
	for k, intent := range l.KeyIntents {
		id := identityOf('k', k[0], k[1])
		out[id] = append(out[id], identityOf('i', k[0], intent))
	}
	for k, refs := range l.KeptRefs {
		id := identityOf('k', k[0], k[1])
		for _, ref := range refs {
			out[id] = append(append(out[id], refIdentity(ref)), holders(ref)...)
		}
	}
	return out
}
