package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// TestLateEventBeatsHeldClaim (sc21's shape): an outcome event settles the attempt in another
// transaction while a reconciler holds its claim (applied from BeforeWrite, after the provider
// answered). The event's state wins; exactly one attempt.resolved (the event's); the lookup
// reaches attempt_transition as a late lookup (terminal → same terminal, cause lookup) and
// nothing else; a conclusive lookup that disagrees with the event escalates a contradiction.
func TestLateEventBeatsHeldClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		spec       attemptSpec
		truth      []providers.Record // created relative to now
		event      func(s attemptSpec, at time.Time) []byte
		status     string
		ref        string
		lookup     map[string]any // the late lookup as audited
		escalation []escalation
	}{
		{
			name: "sc21: succeeded while the lookup found nothing yet",
			spec: airSpec("bi_l21", 21),
			truth: []providers.Record{ // the record is visible only later, as in sc21
				record("AIR-21ESBC", "", providers.StatusConfirmed, time.Now().Add(time.Hour), airSpec("bi_l21", 21).Fingerprint()),
			},
			event: func(s attemptSpec, at time.Time) []byte {
				return s.Outcome("ok", "attempt.succeeded", at, map[string]any{"providerReference": "AIR-21ESBC"})
			},
			status: "CONFIRMED", ref: "AIR-21ESBC",
			lookup: map[string]any{"kind": "fingerprint", "result": "not_found"},
		},
		{
			name: "succeeded while the lookup found the same booking",
			spec: airSpec("bi_lfound", 22),
			truth: []providers.Record{
				record("AIR-FOUND", "", providers.StatusConfirmed, time.Now().Add(-time.Minute), airSpec("bi_lfound", 22).Fingerprint()),
			},
			event: func(s attemptSpec, at time.Time) []byte {
				return s.Outcome("ok", "attempt.succeeded", at, map[string]any{"providerReference": "AIR-FOUND"})
			},
			status: "CONFIRMED", ref: "AIR-FOUND",
			lookup: map[string]any{"kind": "fingerprint", "result": "found", "status": "CONFIRMED", "reference": "AIR-FOUND"},
		},
		{
			name: "failed while the lookup found it CONFIRMED",
			spec: attemptSpec{Tenant: "t_backoff", Intent: "bi_lcontra", Provider: "sim-hotels", ClientRef: "cr_lcontra",
				Traveller: "tr_lcontra", Stay: hotelStay(23)},
			truth: []providers.Record{record("HTL-CONTRA", "cr_lcontra", providers.StatusConfirmed, time.Now().Add(-time.Hour), "")},
			event: func(s attemptSpec, at time.Time) []byte {
				return s.Outcome("ko", "attempt.failed", at, map[string]any{"failureCode": "SOLD_OUT", "retryable": false})
			},
			status:     "FAILED",
			lookup:     map[string]any{"kind": "client_reference", "result": "found", "status": "CONFIRMED", "reference": "HTL-CONTRA"},
			escalation: []escalation{{"t_backoff", "book:bi_lcontra:v1", "contradiction", "open"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := setupOne(t, tc.spec, "read_timeout", "", simulator.Truth{tc.spec.Provider: tc.truth})
			reg := o.reg
			applied := 0
			var hookErr error
			o.rec.BeforeWrite = func(ctx context.Context, a *attempt.Row) {
				// Runs on a reconciler worker, between the provider's answer and the fenced write.
				applied++
				_, hookErr = tryApplyEvent(ctx, o.pool, o.scfg, tc.event(tc.spec, time.Now()))
			}
			o.clk.Add(2 * time.Second)
			if n, err := o.rec.RunOnce(o.ctx); err != nil || n != 1 || applied != 1 || hookErr != nil {
				t.Fatalf("RunOnce = %d, %v (hook ran %d times: %v)", n, err, applied, hookErr)
			}
			r := o.row(t)
			if r.Status != tc.status || r.Source != "event" || r.Ref != tc.ref {
				t.Fatalf("attempt %s/%s/%q, want %s/event/%q: the event wins", r.Status, r.Source, r.Ref, tc.status, tc.ref)
			}
			res := resolutions(t, o.ctx, o.pool)
			if len(res) != 1 || res[0].Status != tc.status || res[0].ResolutionSource != "event" {
				t.Fatalf("resolutions %+v, want one: %s by event", res, tc.status)
			}
			tr := transitions(t, o.ctx, o.pool, r.ID)
			// started → IN_PROGRESS, outcome_unknown → UNKNOWN, the event → terminal, the late lookup.
			if len(tr) != 4 {
				t.Fatalf("transitions %+v, want 4", tr)
			}
			late := tr[3]
			if tr[2].Cause != "event" || tr[2].From != "UNKNOWN" || tr[2].To != tc.status ||
				late.Cause != "lookup" || late.From != tc.status || late.To != tc.status || late.Note != "late lookup after "+tc.status {
				t.Fatalf("transitions %+v: want the event's, then a late lookup", tr)
			}
			for k, v := range tc.lookup {
				if late.Lookup[k] != v {
					t.Fatalf("late lookup %v: %s = %v, want %v", late.Lookup, k, late.Lookup[k], v)
				}
			}
			if got := escalations(t, o.ctx, o.pool); len(got) != len(tc.escalation) || (len(got) == 1 && got[0] != tc.escalation[0]) {
				t.Fatalf("escalations %+v, want %+v", got, tc.escalation)
			}
			if n := count(t, o.ctx, o.pool, `SELECT count(*) FROM anomaly WHERE kind = 'contradiction'`); n != len(tc.escalation) {
				t.Fatalf("%d contradiction anomalies, want %d", n, len(tc.escalation))
			}
			if got := metric(t, reg, "bookrecon_contradictions_total"); got != float64(len(tc.escalation)) {
				t.Fatalf("contradictions metric %v", got)
			}
			if got := metric(t, reg, "bookrecon_lease_lost_total"); got != 0 {
				t.Fatalf("an event is not a lost lease: lease_lost = %v", got)
			}
			if got := metric(t, reg, "bookrecon_resolutions_total"); got != 0 {
				t.Fatalf("the reconciler counted %v resolutions; the event resolved it", got)
			}
		})
	}
}

// TestVerdictThenContradictingEvent: the reconciler's verdict commits first, then an outcome
// event arrives. A contradicting one (failed after CONFIRMED, succeeded with another reference,
// succeeded after FAILED) leaves the verdict in place and escalates a contradiction; a
// confirming one is an idempotent repeat. Either way there is exactly one attempt.resolved.
func TestVerdictThenContradictingEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		truth  providers.RecordStatus
		event  func(s attemptSpec, at time.Time) []byte
		status string // the verdict, which stays
		contra bool
	}{
		{"failed after CONFIRMED", providers.StatusConfirmed, func(s attemptSpec, at time.Time) []byte {
			return s.Outcome("ko", "attempt.failed", at, map[string]any{"failureCode": "SOLD_OUT", "retryable": false})
		}, "CONFIRMED", true},
		{"succeeded with another reference after CONFIRMED", providers.StatusConfirmed, func(s attemptSpec, at time.Time) []byte {
			return s.Outcome("ok", "attempt.succeeded", at, map[string]any{"providerReference": "HTL-OTHER"})
		}, "CONFIRMED", true},
		{"succeeded after FAILED (REJECTED)", providers.StatusRejected, func(s attemptSpec, at time.Time) []byte {
			return s.Outcome("ok", "attempt.succeeded", at, map[string]any{"providerReference": "HTL-V"})
		}, "FAILED", true},
		{"succeeded with the same reference: a repeat", providers.StatusConfirmed, func(s attemptSpec, at time.Time) []byte {
			return s.Outcome("ok", "attempt.succeeded", at, map[string]any{"providerReference": "HTL-V"})
		}, "CONFIRMED", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := attemptSpec{Tenant: "t_verdict", Intent: "bi_v", Provider: "sim-hotels", ClientRef: "cr_v", Traveller: "tr_v", Stay: hotelStay(30)}
			o := setupOne(t, spec, "read_timeout", "", simulator.Truth{"sim-hotels": {
				record("HTL-V", "cr_v", tc.truth, time.Now().Add(-time.Hour), ""),
			}})
			o.clk.Add(2 * time.Second)
			if n, err := o.rec.RunOnce(o.ctx); err != nil || n != 1 {
				t.Fatalf("RunOnce = %d, %v", n, err)
			}
			if r := o.row(t); r.Status != tc.status || r.Source != "client_reference" || r.Ref != "HTL-V" {
				t.Fatalf("verdict %s/%s/%q", r.Status, r.Source, r.Ref)
			}
			applyEvent(t, o.ctx, o.pool, o.scfg, tc.event(spec, time.Now()))
			r := o.row(t)
			if r.Status != tc.status || r.Source != "client_reference" || r.Ref != "HTL-V" {
				t.Fatalf("after the event %s/%s/%q; the verdict stays %s/client_reference/HTL-V", r.Status, r.Source, r.Ref, tc.status)
			}
			res := resolutions(t, o.ctx, o.pool)
			if len(res) != 1 || res[0].Status != tc.status || res[0].ResolutionSource != "client_reference" {
				t.Fatalf("resolutions %+v, want one: the verdict", res)
			}
			var want []escalation
			if tc.contra {
				want = []escalation{{"t_verdict", spec.Key(), "contradiction", "open"}}
			}
			if got := escalations(t, o.ctx, o.pool); len(got) != len(want) || (len(got) == 1 && got[0] != want[0]) {
				t.Fatalf("escalations %+v, want %+v", got, want)
			}
			tr := transitions(t, o.ctx, o.pool, r.ID)
			if last := tr[len(tr)-1]; last.Cause != "event" || last.From != tc.status || last.To != tc.status {
				t.Fatalf("the event's audit row %+v, want %s → %s by event", last, tc.status, tc.status)
			}
		})
	}
}
