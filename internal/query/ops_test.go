package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/query"
)

// Fixed rows: three attempts, five escalations, the audit trail of two attempts.
var (
	t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

	a1 = uuid.MustParse("01900000-0000-7000-8000-000000000001") // t_1 BOOK v1 at sim-legacy, UNKNOWN
	a2 = uuid.MustParse("01900000-0000-7000-8000-000000000002") // t_1 BOOK v2 at sim-hotels, CONFIRMED
	a3 = uuid.MustParse("01900000-0000-7000-8000-000000000003") // t_2 REFUND v1 at sim-pay, UNKNOWN

	e1 = uuid.MustParse("02900000-0000-5000-8000-000000000001") // a1 no_lookup_capability, open
	e3 = uuid.MustParse("02900000-0000-5000-8000-000000000003") // a2 blind_retry, open
	e4 = uuid.MustParse("02900000-0000-5000-8000-000000000004") // a2 duplicate_booking, closed by ops
	e5 = uuid.MustParse("02900000-0000-5000-8000-000000000005") // a3 deadline_exceeded, open
)

func ptr[T any](v T) *T { return &v }

func seedOps(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t_1', 'bi_a'), ('t_1', 'bi_b'), ('t_2', 'bi_c')`, nil},
		{`INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key,
			provider, status, resolution_source, provider_reference, failure_code, retryable, timeout_class, client_reference,
			first_event_at, window_start, created_at, unknown_since, terminal_at, check_count, next_check_at, last_lookup_result)
			VALUES
			($1, 't_1', 'bi_a', 'BOOK', 'bi_a', 1, 'book:bi_a:v1', 'sim-legacy', 'UNKNOWN', NULL, NULL, NULL, NULL, 'read_timeout', 'cr_a',
			 $4, $4, $4, $4::timestamptz + interval '1 second', NULL, 0, NULL, NULL),
			($2, 't_1', 'bi_b', 'BOOK', 'bi_b', 2, 'book:bi_b:v2', 'sim-hotels', 'CONFIRMED', 'event', 'HTL-2', NULL, NULL, NULL, NULL,
			 $4::timestamptz + interval '2 minutes', $4::timestamptz + interval '2 minutes', $4::timestamptz + interval '2 minutes', NULL, $4::timestamptz + interval '3 minutes', 0, NULL, NULL),
			($3, 't_2', 'bi_c', 'REFUND', 'pay_9', 1, 'refund:pay_9:v1', 'sim-pay', 'UNKNOWN', NULL, NULL, NULL, NULL, 'client_timeout', 'cr_c',
			 $4::timestamptz + interval '10 minutes', $4::timestamptz + interval '10 minutes', $4::timestamptz + interval '10 minutes', $4::timestamptz + interval '10 minutes', NULL, 4,
			 $4::timestamptz + interval '70 minutes', 'not_found')`, []any{a1, a2, a3, t0}},
		{`INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason, state, opened_at, closed_at, closed_by, actor) VALUES
			($1, $5, 't_1', 'no_lookup_capability', 'open', $8::timestamptz + interval '1 minute', NULL, NULL, NULL),
			($2, $6, 't_1', 'blind_retry', 'open', $8::timestamptz + interval '2 minutes', NULL, NULL, NULL),
			($3, $6, 't_1', 'duplicate_booking', 'closed', $8::timestamptz + interval '3 minutes', $8::timestamptz + interval '10 minutes', 'manual', 'ops.agent.07'),
			($4, $7, 't_2', 'deadline_exceeded', 'open', $8::timestamptz + interval '40 minutes', NULL, NULL, NULL)`,
			[]any{e1, e3, e4, e5, a1, a2, a3, t0}},
		{`INSERT INTO attempt_transition (attempt_id, from_status, to_status, cause, event_id, lookup, actor, reason, note, created_at) VALUES
			($1, NULL, 'IN_PROGRESS', 'event', 'evt_1', NULL, NULL, NULL, 'started', $3),
			($1, 'IN_PROGRESS', 'UNKNOWN', 'event', 'evt_2', NULL, NULL, NULL, 'outcome unknown: read_timeout', $3::timestamptz + interval '1 second'),
			($2, NULL, 'CONFIRMED', 'event', 'evt_3', NULL, NULL, NULL, 'created by its outcome', $3::timestamptz + interval '3 minutes'),
			($2, 'CONFIRMED', 'CONFIRMED', 'manual', 'dec_1', NULL, 'ops.agent.07', 'the second booking was cancelled by phone', 'decision equals the current state', $3::timestamptz + interval '10 minutes'),
			($1, 'UNKNOWN', 'UNKNOWN', 'lookup', NULL, '{"kind": "client_reference", "result": "error"}', NULL, NULL, 'audit only', $3::timestamptz + interval '5 minutes')`,
			[]any{a1, a2, t0}},
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	return pool
}

// The rows Escalations should return, at now = t0 + 1h.
var (
	now   = t0.Add(time.Hour)
	rowE1 = query.Escalation{EscalationID: e1, TenantID: "t_1", IdempotencyKey: "book:bi_a:v1", BookingIntentID: "bi_a",
		Reason: attempt.ReasonNoLookupCapability, State: "open", OpenedAt: t0.Add(time.Minute), Age: 59 * time.Minute,
		AttemptID: a1, AttemptStatus: attempt.StatusUnknown, Provider: "sim-legacy"}
	rowE3 = query.Escalation{EscalationID: e3, TenantID: "t_1", IdempotencyKey: "book:bi_b:v2", BookingIntentID: "bi_b",
		Reason: attempt.ReasonBlindRetry, State: "open", OpenedAt: t0.Add(2 * time.Minute), Age: 58 * time.Minute,
		AttemptID: a2, AttemptStatus: attempt.StatusConfirmed, Provider: "sim-hotels"}
	rowE4 = query.Escalation{EscalationID: e4, TenantID: "t_1", IdempotencyKey: "book:bi_b:v2", BookingIntentID: "bi_b",
		Reason: attempt.ReasonDuplicateBooking, State: "closed", OpenedAt: t0.Add(3 * time.Minute), ClosedAt: ptr(t0.Add(10 * time.Minute)),
		ClosedBy: "manual", Actor: "ops.agent.07", Age: 57 * time.Minute,
		AttemptID: a2, AttemptStatus: attempt.StatusConfirmed, Provider: "sim-hotels"}
	rowE5 = query.Escalation{EscalationID: e5, TenantID: "t_2", IdempotencyKey: "refund:pay_9:v1", BookingIntentID: "bi_c",
		Reason: attempt.ReasonDeadlineExceeded, State: "open", OpenedAt: t0.Add(40 * time.Minute), Age: 20 * time.Minute,
		AttemptID: a3, AttemptStatus: attempt.StatusUnknown, Provider: "sim-pay"}
)

func TestEscalations(t *testing.T) {
	t.Parallel()
	pool := seedOps(t)
	for _, tt := range []struct {
		name   string
		filter query.EscalationFilter
		want   []query.Escalation
	}{
		{"DefaultOpen", query.EscalationFilter{}, []query.Escalation{rowE1, rowE3, rowE5}},
		{"Closed", query.EscalationFilter{State: "closed"}, []query.Escalation{rowE4}},
		{"All", query.EscalationFilter{State: "all"}, []query.Escalation{rowE1, rowE3, rowE4, rowE5}},
		{"Reason", query.EscalationFilter{Reason: "blind_retry"}, []query.Escalation{rowE3}},
		{"ReasonClosedOnlyWhenAsked", query.EscalationFilter{Reason: "duplicate_booking"}, nil},
		{"Provider", query.EscalationFilter{Provider: "sim-pay", State: "all"}, []query.Escalation{rowE5}},
		{"OlderThan", query.EscalationFilter{OlderThan: 30 * time.Minute}, []query.Escalation{rowE1, rowE3}},
		{"OlderThanBoundaryInclusive", query.EscalationFilter{OlderThan: 58 * time.Minute}, []query.Escalation{rowE1, rowE3}},
		{"Tenant", query.EscalationFilter{TenantID: "t_2"}, []query.Escalation{rowE5}},
		{"Combined", query.EscalationFilter{State: "all", Provider: "sim-hotels", OlderThan: 57 * time.Minute}, []query.Escalation{rowE3, rowE4}},
		{"Limit", query.EscalationFilter{Limit: 1}, []query.Escalation{rowE1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.filter.Now = now
			got, err := query.Escalations(context.Background(), pool, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Escalations(%+v) (-want +got):\n%s", tt.filter, diff)
			}
		})
	}
	t.Run("InvalidFilter", func(t *testing.T) {
		t.Parallel()
		_, err := query.Escalations(context.Background(), pool, query.EscalationFilter{State: "pending", Reason: "late", OlderThan: -time.Second})
		want := "query: escalation filter: state must be open, closed or all\n" +
			"reason must be one of [deadline_exceeded ambiguous_match no_lookup_capability key_conflict blind_retry duplicate_booking duplicate_provider_reference contradiction]\n" +
			"older-than must not be negative"
		if err == nil || err.Error() != want {
			t.Errorf("err = %v, want\n%s", err, want)
		}
	})
}

func TestEscalationJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(rowE4)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"escalationId":"02900000-0000-5000-8000-000000000004","tenantId":"t_1","idempotencyKey":"book:bi_b:v2",` +
		`"bookingIntentId":"bi_b","reason":"duplicate_booking","state":"closed","openedAt":"2026-11-30T09:03:00Z",` +
		`"closedAt":"2026-11-30T09:10:00Z","closedBy":"manual","actor":"ops.agent.07",` +
		`"attemptId":"01900000-0000-7000-8000-000000000002","attemptStatus":"CONFIRMED","provider":"sim-hotels","ageSeconds":3420}`
	if string(b) != want {
		t.Errorf("json = %s\nwant %s", b, want)
	}
}

var (
	attemptA1 = query.Attempt{ID: a1, TenantID: "t_1", BookingIntentID: "bi_a", Operation: "BOOK", Subject: "bi_a", Version: 1,
		IdempotencyKey: "book:bi_a:v1", Provider: "sim-legacy", Status: attempt.StatusUnknown, TimeoutClass: "read_timeout",
		ClientReference: "cr_a", CreatedAt: t0, UnknownSince: ptr(t0.Add(time.Second))}
	attemptA2 = query.Attempt{ID: a2, TenantID: "t_1", BookingIntentID: "bi_b", Operation: "BOOK", Subject: "bi_b", Version: 2,
		IdempotencyKey: "book:bi_b:v2", Provider: "sim-hotels", Status: attempt.StatusConfirmed, ResolutionSource: "event",
		ProviderReference: "HTL-2", CreatedAt: t0.Add(2 * time.Minute), TerminalAt: ptr(t0.Add(3 * time.Minute))}
)

func TestHistory(t *testing.T) {
	t.Parallel()
	pool := seedOps(t)
	ctx := context.Background()
	got, err := query.History(ctx, pool, "t_1", "book:bi_a:v1")
	if err != nil {
		t.Fatal(err)
	}
	want := query.AttemptHistory{Attempt: attemptA1, Transitions: []query.Transition{
		{ID: 1, At: t0, To: "IN_PROGRESS", Cause: "event", EventID: "evt_1", Note: "started"},
		{ID: 2, At: t0.Add(time.Second), From: "IN_PROGRESS", To: "UNKNOWN", Cause: "event", EventID: "evt_2", Note: "outcome unknown: read_timeout"},
		{ID: 5, At: t0.Add(5 * time.Minute), From: "UNKNOWN", To: "UNKNOWN", Cause: "lookup",
			Lookup: json.RawMessage(`{"kind": "client_reference", "result": "error"}`), Note: "audit only"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ tenant, key string }{{"t_1", "book:bi_x:v1"}, {"t_2", "book:bi_a:v1"}} {
		if _, err := query.History(ctx, pool, c.tenant, c.key); !errors.Is(err, query.ErrNotFound) {
			t.Errorf("History(%s, %s) err = %v, want ErrNotFound", c.tenant, c.key, err)
		}
	}
}

func TestEscalationByID(t *testing.T) {
	t.Parallel()
	pool := seedOps(t)
	ctx := context.Background()
	got, err := query.EscalationByID(ctx, pool, e4, now)
	if err != nil {
		t.Fatal(err)
	}
	want := query.EscalationDetail{Escalation: rowE4, Attempt: attemptA2, Escalations: []query.Escalation{rowE3, rowE4},
		Transitions: []query.Transition{
			{ID: 3, At: t0.Add(3 * time.Minute), To: "CONFIRMED", Cause: "event", EventID: "evt_3", Note: "created by its outcome"},
			{ID: 4, At: t0.Add(10 * time.Minute), From: "CONFIRMED", To: "CONFIRMED", Cause: "manual", EventID: "dec_1",
				Actor: "ops.agent.07", Reason: "the second booking was cancelled by phone", Note: "decision equals the current state"},
		}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EscalationByID (-want +got):\n%s", diff)
	}
	if _, err := query.EscalationByID(ctx, pool, uuid.Must(uuid.NewV7()), now); !errors.Is(err, query.ErrNotFound) {
		t.Errorf("EscalationByID(unknown id) err = %v, want ErrNotFound", err)
	}
}

// TestHistoryFromThePipeline drives one attempt through the ingester's state machine — start,
// outcome unknown at a provider without lookups (escalated no_lookup_capability), a manual
// decision — and checks that the history and the escalation tell the story with every cause.
func TestHistoryFromThePipeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const intent = "bi_legacy"
	s, u := started(intent, 1, -2*time.Minute), unknownEv(intent, 1, -time.Minute)
	s.provider, u.provider = "sim-legacy", "sim-legacy"
	b.apply(t, s, u)
	b.decide(t, intent, "book:bi_legacy:v1", map[string]any{"eventId": "dec_42", "decision": "CONFIRMED",
		"providerReference": "LEG-42", "reason": "verified with the property by phone"})

	h, err := query.History(ctx, b.pool, "t_1", "book:bi_legacy:v1")
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmpopts.IgnoreFields(query.Transition{}, "ID", "At", "EventID")
	want := []query.Transition{
		{To: "IN_PROGRESS", Cause: "event", Note: "started"},
		{From: "IN_PROGRESS", To: "UNKNOWN", Cause: "event", Note: "outcome unknown: read_timeout"},
		{From: "UNKNOWN", To: "CONFIRMED", Cause: "manual", Actor: "ops.agent.07", Reason: "verified with the property by phone", Note: "manual decision"},
	}
	if diff := cmp.Diff(want, h.Transitions, ignore); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if len(h.Transitions) == 3 && h.Transitions[2].EventID != "dec_42" {
		t.Errorf("the manual transition's event id = %q, want dec_42", h.Transitions[2].EventID)
	}
	if h.Attempt.Status != attempt.StatusConfirmed || h.Attempt.ResolutionSource != "manual" || h.Attempt.ProviderReference != "LEG-42" {
		t.Errorf("attempt = %+v, want CONFIRMED by manual with LEG-42", h.Attempt)
	}

	es, err := query.Escalations(ctx, b.pool, query.EscalationFilter{State: "all"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Fatalf("escalations = %+v, want one", es)
	}
	e := es[0]
	if e.Reason != attempt.ReasonNoLookupCapability || e.State != "closed" || e.ClosedBy != "manual" || e.Actor != "ops.agent.07" ||
		e.AttemptStatus != attempt.StatusConfirmed || e.Provider != "sim-legacy" || e.IdempotencyKey != "book:bi_legacy:v1" {
		t.Errorf("escalation = %+v, want no_lookup_capability closed by manual (ops.agent.07)", e)
	}
	d, err := query.EscalationByID(ctx, b.pool, e.EscalationID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, d.Transitions, ignore); diff != "" {
		t.Errorf("escalation show transitions (-want +got):\n%s", diff)
	}
}
