package attempt

// The flush of the one write path (Bulk): what a batch buffered, written set-based, each parent
// before the rows that name it (escalation and anomaly keep their foreign keys; the audit trail's,
// the claims' and the attempt's went in migration 00009, and migrations.Orphans checks them).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/outbox"
)

// flush writes the buffers parents first: a one-step batch's fenced check first, attempts,
// audit, anomalies, escalations, closes, kept decisions, outbox, claims.
func (b *Bulk) flush(ctx context.Context) error {
	defer b.reset()
	for _, write := range []func(context.Context, pgx.Tx) error{
		b.flushCheck, b.flushInserts, b.flushAttempts, b.flushAudits, b.flushRows, b.flushCloses, b.flushMessages, b.flushClaims,
	} {
		if err := write(ctx, b.t.tx); err != nil {
			return err
		}
	}
	return nil
}

// flushCheck writes the fenced check first: a lost lease (no row) is errNotWritten, and nothing
// after it is written.
func (b *Bulk) flushCheck(ctx context.Context, tx pgx.Tx) error {
	if c := b.check; c != nil {
		a := c.a
		tag, err := tx.Exec(ctx, q("booking_attempt_record_check"), a.ID, c.fence, a.CheckCount, a.NextCheckAt,
			string(StatusUnknown), a.LastLookupResult)
		if err != nil {
			return fmt.Errorf("attempt: write %s/%s: %w", a.TenantID, a.IdempotencyKey, err)
		}
		if tag.RowsAffected() == 0 {
			return errNotWritten // the lease was lost: nothing after it
		}
	}
	return nil
}

// flushInserts writes the new attempts: one by one, insert-first, in a one-step batch (a create
// that lost its race is errNotWritten: the caller decides again), else with one COPY.
func (b *Bulk) flushInserts(ctx context.Context, tx pgx.Tx) error {
	if b.single && len(b.inserts) > 0 {
		// Insert-first: created meanwhile under another intent's lock, it writes nothing and the
		// caller decides again.
		for _, a := range b.inserts {
			rc := a.recovery
			tag, err := tx.Exec(ctx, q("booking_attempt_insert"), a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject,
				a.Version, a.IdempotencyKey, a.Provider, string(a.Status), string(a.Source), requestJSON(a.request), a.RequestHash,
				a.Fingerprint, rc.ClientReference, rc.ProviderSessionID, rc.CorrelationID, rc.PaymentReference, rc.ProviderReference,
				rc.ProviderIdempotencyKey, a.ProviderReference, a.FailureCode, retryableOf(a), a.TimeoutClass, a.requestSent,
				a.StartedAt, a.FirstEventAt, a.WindowStart, a.FailedFactAt, a.UnknownSince, a.TerminalAt, a.NextCheckAt, a.CreatedAt,
				a.GateJudged, a.BlindRetry)
			if err != nil {
				return fmt.Errorf("attempt: write %s/%s: %w", a.TenantID, a.IdempotencyKey, err)
			}
			if tag.RowsAffected() == 0 {
				return errNotWritten
			}
		}
		b.inserts = nil
	}
	if n := len(b.inserts); n > 0 {
		rows := copyRows(n, 35, func(i int, row []any) {
			a := b.inserts[i]
			rc := a.recovery
			copy(row, []any{a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject, a.Version,
				a.IdempotencyKey, a.Provider, string(a.Status), nv(string(a.Source)), requestJSON(a.request), nv(a.RequestHash), nv(a.Fingerprint),
				nv(rc.ClientReference), nv(rc.ProviderSessionID), nv(rc.CorrelationID), nv(rc.PaymentReference), nv(rc.ProviderReference),
				nv(rc.ProviderIdempotencyKey), nv(a.ProviderReference), nv(a.FailureCode), pv(retryableOf(a)), pv(a.StartedAt), a.FirstEventAt,
				a.WindowStart, pv(a.FailedFactAt), pv(a.TerminalAt), a.CreatedAt, a.CreatedAt, nv(a.TimeoutClass), pv(a.requestSent), pv(a.UnknownSince),
				pv(a.NextCheckAt), a.GateJudged, a.BlindRetry})
		})
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"booking_attempt"}, []string{"id", "tenant_id", "booking_intent_id", "operation",
			"subject", "operation_version", "idempotency_key", "provider", "status", "resolution_source", "request", "request_hash",
			"fingerprint", "client_reference", "provider_session_id", "correlation_id", "payment_reference", "subject_provider_reference",
			"provider_idempotency_key", "provider_reference", "failure_code", "retryable", "started_at", "first_event_at",
			"window_start", "failed_fact_at", "terminal_at", "created_at", "updated_at", "timeout_class", "request_sent",
			"unknown_since", "next_check_at", "gate_judged", "blind_retry"}, rows)
		if err != nil {
			return fmt.Errorf("attempt: bulk insert %d attempts: %w", n, err)
		}
	}
	return nil
}

// flushAttempts writes the existing attempts the batch changed: their state, late-start fills,
// gate marks and recorded references, one UPDATE FROM unnest each.
func (b *Bulk) flushAttempts(ctx context.Context, tx pgx.Tx) error {
	if n := len(b.updates); n > 0 {
		var ids []uuid.UUID
		var status, source, ref, code, timeoutClass []string
		var retryable []*bool
		var window []time.Time
		var failedAt, unknownSince, terminalAt, nextCheck []*time.Time
		for _, a := range b.updates {
			ids, timeoutClass = append(ids, a.ID), append(timeoutClass, a.TimeoutClass)
			status, source, ref, code = append(status, string(a.Status)), append(source, string(a.Source)), append(ref, a.ProviderReference), append(code, a.FailureCode)
			retryable, window, failedAt = append(retryable, retryableOf(a)), append(window, a.WindowStart), append(failedAt, a.FailedFactAt)
			unknownSince, terminalAt, nextCheck = append(unknownSince, a.UnknownSince), append(terminalAt, a.TerminalAt), append(nextCheck, a.NextCheckAt)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_update_many"), ids, status, source, ref, code, retryable, window, failedAt,
			timeoutClass, unknownSince, terminalAt, nextCheck); err != nil {
			return fmt.Errorf("attempt: bulk update %d attempts: %w", n, err)
		}
	}
	if n := len(b.fills); n > 0 {
		var ids []uuid.UUID
		var reqs [][]byte
		var hash, fp, cr, ps, corr, pay, subj, pik []string
		var started []*time.Time
		var window []time.Time
		for _, a := range b.fills {
			rc := a.recovery
			ids, reqs, hash, fp = append(ids, a.ID), append(reqs, requestJSON(a.request)), append(hash, a.RequestHash), append(fp, a.Fingerprint)
			cr, ps, corr, pay = append(cr, rc.ClientReference), append(ps, rc.ProviderSessionID), append(corr, rc.CorrelationID), append(pay, rc.PaymentReference)
			subj, pik = append(subj, rc.ProviderReference), append(pik, rc.ProviderIdempotencyKey)
			started, window = append(started, a.StartedAt), append(window, a.WindowStart)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_fill_many"), ids, reqs, hash, fp, cr, ps, corr, pay, subj, pik, started, window); err != nil {
			return fmt.Errorf("attempt: bulk fill %d attempts: %w", n, err)
		}
	}
	if n := len(b.marks); n > 0 {
		ids := make([]uuid.UUID, 0, n)
		var blind []bool
		for _, a := range b.marks {
			ids, blind = append(ids, a.ID), append(blind, a.BlindRetry)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_mark_gate_many"), ids, blind); err != nil {
			return fmt.Errorf("attempt: bulk gate marks %d attempts: %w", n, err)
		}
	}
	if n := len(b.refs); n > 0 {
		ids := make([]uuid.UUID, 0, n)
		refs := make([]string, 0, n)
		for _, a := range b.refs {
			ids, refs = append(ids, a.ID), append(refs, a.ProviderReference)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_record_reference_many"), ids, refs); err != nil {
			return fmt.Errorf("attempt: bulk references %d attempts: %w", n, err)
		}
	}
	return nil
}

// flushAudits writes the audit rows with one COPY.
func (b *Bulk) flushAudits(ctx context.Context, tx pgx.Tx) error {
	if n := len(b.audits); n > 0 {
		lookups := make([][]byte, n) // JSON-encoded first: COPY's rows cannot fail
		for i, a := range b.audits {
			if a.Lookup != nil {
				var err error
				if lookups[i], err = json.Marshal(a.Lookup); err != nil {
					return err
				}
			}
		}
		rows := copyRows(n, 9, func(i int, row []any) {
			a := &b.audits[i]
			copy(row, []any{a.id, nv(string(a.From)), string(a.To), a.Cause, nv(a.EventID), lookups[i], nv(a.Actor), nv(a.Reason), a.Note})
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"attempt_transition"},
			[]string{"attempt_id", "from_status", "to_status", "cause", "event_id", "lookup", "actor", "reason", "note"}, rows); err != nil {
			return fmt.Errorf("attempt: bulk audit: %w", err)
		}
	}
	return nil
}

// flushRows writes the anomalies and the escalations opened (COPY) and the decisions kept.
func (b *Bulk) flushRows(ctx context.Context, tx pgx.Tx) error {
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"anomaly", []string{"tenant_id", "attempt_id", "kind", "event_id", "detail"}, b.anomalies},
		{"escalation", []string{"escalation_id", "attempt_id", "tenant_id", "reason", "state"}, b.escalations},
	} {
		if len(c.rows) == 0 {
			continue
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("attempt: bulk %s: %w", c.table, err)
		}
	}
	if n := len(b.keeps); n > 0 {
		var tenant, key, eventID []string
		var raw [][]byte
		for _, k := range b.keeps {
			tenant, key, eventID, raw = append(tenant, k.tenantID), append(key, k.key), append(eventID, k.eventID), append(raw, k.raw)
		}
		if _, err := tx.Exec(ctx, q("pending_decision_insert_many"), tenant, key, eventID, raw); err != nil {
			return fmt.Errorf("attempt: keep %d decisions: %w", n, err)
		}
	}
	return nil
}

// flushCloses closes escalations, marks deadlines judged and kept decisions applied or failed.
func (b *Bulk) flushCloses(ctx context.Context, tx pgx.Tx) error {
	if n := len(b.closes); n > 0 {
		ids := make([]uuid.UUID, 0, n)
		var closedBy, actor []string
		for _, c := range b.closes {
			ids, closedBy, actor = append(ids, c.id), append(closedBy, c.closedBy), append(actor, c.actor)
		}
		if _, err := tx.Exec(ctx, q("escalation_close_many"), ids, closedBy, actor, string(EscalationClosed), string(EscalationOpen)); err != nil {
			return fmt.Errorf("attempt: bulk close %d escalations: %w", n, err)
		}
	}
	for _, id := range b.deadlineDone {
		if _, err := tx.Exec(ctx, q("booking_attempt_mark_deadline_done"), id); err != nil {
			return fmt.Errorf("attempt: mark deadline judged %s: %w", id, err)
		}
	}
	for _, d := range b.done {
		var err error
		if d.reason == "" {
			_, err = tx.Exec(ctx, q("pending_decision_mark_applied"), d.tenantID, d.key, d.eventID)
		} else {
			_, err = tx.Exec(ctx, q("pending_decision_mark_failed"), d.tenantID, d.key, d.eventID, d.reason)
		}
		if err != nil {
			return fmt.Errorf("attempt: mark decision %s: %w", d.eventID, err)
		}
	}
	return nil
}

// flushMessages writes the outbox messages, then escalates the owners outside the batch of
// references the batch found held.
func (b *Bulk) flushMessages(ctx context.Context, tx pgx.Tx) error {
	if err := outbox.InsertMany(ctx, tx, b.messages); err != nil {
		return err
	}
	for _, id := range b.foreign {
		other, err := ReadByID(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("attempt: read owner: %w", err)
		}
		if err := b.t.Escalate(ctx, other, ReasonDuplicateProviderReference, ""); err != nil {
			return err
		}
	}
	return nil
}

// flushClaims claims the provider references in key order; a reference another transaction
// claimed meanwhile is the database's answer, applied as ClaimReference does.
func (b *Bulk) flushClaims(ctx context.Context, tx pgx.Tx) error {
	if len(b.claims) == 0 {
		return nil
	}
	// Claim in key order, so two batches claiming overlapping references cannot deadlock.
	slices.SortStableFunc(b.claims, func(cx, cy bulkClaim) int {
		x, y := cx.a, cy.a
		return cmp.Or(strings.Compare(x.Provider, y.Provider), strings.Compare(string(x.Operation), string(y.Operation)),
			strings.Compare(cx.ref, cy.ref))
	})
	var prov, op, ref, tenant []string
	var ids []uuid.UUID
	for _, c := range b.claims {
		a := c.a
		prov, op, ref, tenant, ids = append(prov, a.Provider), append(op, string(a.Operation)), append(ref, c.ref),
			append(tenant, a.TenantID), append(ids, a.ID)
	}
	rows, err := tx.Query(ctx, q("provider_reference_claim_insert_many"), prov, op, ref, ids, tenant)
	if err != nil {
		return fmt.Errorf("attempt: bulk claim: %w", err)
	}
	won := map[[3]string]bool{}
	var r [3]string
	if _, err := pgx.ForEachRow(rows, []any{&r[0], &r[1], &r[2]}, func() error { won[r] = true; return nil }); err != nil {
		return fmt.Errorf("attempt: bulk claim: %w", err)
	}
	for _, c := range b.claims {
		if !won[[3]string{c.a.Provider, string(c.a.Operation), c.ref}] {
			// Claimed meanwhile by another transaction (the batch read who held it at its start):
			// the database's answer, OnClaimConflict's rule as ClaimReference applies it.
			a := *c.a
			a.ProviderReference = c.ref
			if err := b.t.ClaimReference(ctx, &a, c.eventID); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset empties the buffers after a Flush; the attempts in memory stay, as stored.
func (b *Bulk) reset() {
	b.inserts, b.audits, b.messages, b.claims, b.escalations, b.anomalies, b.keeps, b.closes, b.done = nil, nil, nil, nil, nil, nil, nil, nil, nil
	b.check, b.deadlineDone, b.foreign = nil, nil, nil
	clear(b.inserted)
	clear(b.updates)
	clear(b.fills)
	clear(b.refs)
	clear(b.marks)
}

// copyRows is a COPY source of n rows of width values (pgx.CopyFromSlice), row i written by fill
// into one row reused for every row: COPY encodes a row before it asks for the next.
func copyRows(n, width int, fill func(i int, row []any)) pgx.CopyFromSource {
	row := make([]any, width)
	return pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		fill(i, row)
		return row, nil
	})
}

// nv is s as a nullable column value: nil (NULL) when empty.
func nv(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// pv is *p as a column value: nil (NULL) when p is nil.
func pv[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
