package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/reconcile"
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
			reconcile.SetBeforeWrite(o.rec, func(ctx context.Context, a *attempt.Row) {
				// Runs on a reconciler worker, between the provider's answer and the fenced write.
				applied++
				_, hookErr = tryApplyEvent(ctx, o.pool, o.scfg, tc.event(tc.spec, time.Now()))
			})
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

// TestLateVerdictAfterLostLease: reconciler A is paused in BeforeWrite (after the provider
// answered, before the fenced write) while the clock passes its lease and another path takes
// the attempt over: reconciler B re-claims and settles it by its own lookup, or B re-claims and
// an outcome event settles it, or B only holds the claim. A's verdict is never lost and never
// applied: it reaches attempt_transition exactly once (from = to = the current status, cause
// lookup, a lease-lost note), a conclusive disagreeing one opens exactly one contradiction
// (anomaly, escalation, counter), an agreeing one none; the attempt's status, source,
// reference, token, owner and schedule are the ones the other path left; the lost lease is
// counted.
func TestLateVerdictAfterLostLease(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Second // 2 × the default CallTimeout
	for _, tc := range []struct {
		name  string
		id    string             // the attempt is bi_<id>, client reference cr_<id>
		truth []providers.Record // what A's lookup sees
		// takeOver runs in A's pause once the clock is past A's lease: B and the event.
		takeOver func(ctx context.Context, o *oneAttempt, b *reconcile.Reconciler, spec attemptSpec) error
		status   string // the attempt after the take-over, unchanged by A
		source   string
		ref      string
		note     string
		lookup   map[string]any // A's lookup as audited
		contra   bool
		resolved string // the resolution source of the single attempt.resolved; "" none
	}{
		{
			name:  "agreeing: A and the new owner both find it CONFIRMED",
			id:    "la",
			truth: []providers.Record{record("HTL-LA", "cr_la", providers.StatusConfirmed, time.Now().Add(-time.Hour), "")},
			takeOver: func(ctx context.Context, _ *oneAttempt, b *reconcile.Reconciler, _ attemptSpec) error {
				return runOnceExactly(ctx, b, 1)
			},
			status: "CONFIRMED", source: "client_reference", ref: "HTL-LA", note: "late lookup after CONFIRMED; lease lost",
			lookup:   map[string]any{"kind": "client_reference", "result": "found", "status": "CONFIRMED", "reference": "HTL-LA"},
			resolved: "client_reference",
		},
		{
			name: "disagreeing: an authoritative not-found while the new owner found it CONFIRMED",
			id:   "ln",
			takeOver: func(ctx context.Context, o *oneAttempt, b *reconcile.Reconciler, _ attemptSpec) error {
				if err := o.sim.AddTruth(simulator.Truth{"sim-hotels": {
					record("HTL-LN", "cr_ln", providers.StatusConfirmed, time.Now().Add(-time.Hour), ""),
				}}); err != nil {
					return err
				}
				return runOnceExactly(ctx, b, 1)
			},
			status: "CONFIRMED", source: "client_reference", ref: "HTL-LN", note: "late lookup after CONFIRMED; lease lost",
			lookup: map[string]any{"kind": "client_reference", "result": "not_found"},
			contra: true, resolved: "client_reference",
		},
		{
			name:  "disagreeing: found CONFIRMED while an event failed it under the new owner's claim",
			id:    "le",
			truth: []providers.Record{record("HTL-LE", "cr_le", providers.StatusConfirmed, time.Now().Add(-time.Hour), "")},
			takeOver: func(ctx context.Context, o *oneAttempt, b *reconcile.Reconciler, spec attemptSpec) error {
				if got, err := b.Claim(ctx, 1); err != nil || len(got) != 1 {
					return fmt.Errorf("B claimed %d: %w", len(got), err)
				}
				_, err := tryApplyEvent(ctx, o.pool, o.scfg, spec.Outcome("ko", "attempt.failed", time.Now(),
					map[string]any{"failureCode": "SOLD_OUT", "retryable": false}))
				return err
			},
			status: "FAILED", source: "event", note: "late lookup after FAILED; lease lost",
			lookup: map[string]any{"kind": "client_reference", "result": "found", "status": "CONFIRMED", "reference": "HTL-LE"},
			contra: true, resolved: "event",
		},
		{
			name:  "still UNKNOWN: the new owner holds the claim",
			id:    "lu",
			truth: []providers.Record{record("HTL-LU", "cr_lu", providers.StatusConfirmed, time.Now().Add(-time.Hour), "")},
			takeOver: func(ctx context.Context, _ *oneAttempt, b *reconcile.Reconciler, _ attemptSpec) error {
				if got, err := b.Claim(ctx, 1); err != nil || len(got) != 1 {
					return fmt.Errorf("B claimed %d: %w", len(got), err)
				}
				return nil
			},
			status: "UNKNOWN", note: "late lookup; lease lost, not applied",
			lookup: map[string]any{"kind": "client_reference", "result": "found", "status": "CONFIRMED", "reference": "HTL-LU"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := attemptSpec{Tenant: "t_lost", Intent: "bi_" + tc.id, Provider: "sim-hotels", ClientRef: "cr_" + tc.id,
				Traveller: "tr_" + tc.id, Stay: hotelStay(40)}
			o := setupOne(t, spec, "read_timeout", "", simulator.Truth{"sim-hotels": tc.truth})
			cfg := demoConfig(mapPath(t))
			cfg.Owner = "rec-b"
			b, _ := newReconciler(t, cfg, o.pool, startSim(t, o.sim, o.clk), o.clk)
			var (
				paused  int
				hookErr error
				taken   row // the attempt as the take-over left it
			)
			reconcile.SetBeforeWrite(o.rec, func(ctx context.Context, a *attempt.Row) {
				paused++
				o.clk.Add(lease + time.Millisecond) // A's lease has expired
				if hookErr = tc.takeOver(ctx, o, b, spec); hookErr == nil {
					taken, hookErr = tryReadRow(ctx, o.pool, spec.Tenant, spec.Key())
				}
			})
			o.clk.Add(2 * time.Second)
			if n, err := o.rec.RunOnce(o.ctx); err != nil || n != 1 || paused != 1 || hookErr != nil {
				t.Fatalf("RunOnce = %d, %v (paused %d times: %v)", n, err, paused, hookErr)
			}
			r := o.row(t)
			if !sameRow(r, taken) || r.Status != tc.status || r.Source != tc.source || r.Ref != tc.ref || r.Token != 2 {
				t.Fatalf("attempt %+v after A's write, want %+v as the take-over left it (%s/%s/%q, token 2)",
					r, taken, tc.status, tc.source, tc.ref)
			}
			tr := transitions(t, o.ctx, o.pool, r.ID)
			var late []transition
			for _, x := range tr {
				if strings.Contains(x.Note, "lease lost") {
					late = append(late, x)
				}
			}
			if len(late) != 1 || tr[len(tr)-1].Note != late[0].Note {
				t.Fatalf("transitions %+v: want exactly one late lookup, the last row", tr)
			}
			if l := late[0]; l.Cause != "lookup" || l.From != tc.status || l.To != tc.status || l.Note != tc.note {
				t.Fatalf("late lookup %+v, want %s → %s by lookup, note %q", l, tc.status, tc.status, tc.note)
			}
			for k, v := range tc.lookup {
				if late[0].Lookup[k] != v {
					t.Fatalf("late lookup %v: %s = %v, want %v", late[0].Lookup, k, late[0].Lookup[k], v)
				}
			}
			var wantEsc []escalation
			if tc.contra {
				wantEsc = []escalation{{spec.Tenant, spec.Key(), "contradiction", "open"}}
			}
			if got := escalations(t, o.ctx, o.pool); len(got) != len(wantEsc) || (len(got) == 1 && got[0] != wantEsc[0]) {
				t.Fatalf("escalations %+v, want %+v", got, wantEsc)
			}
			if n := count(t, o.ctx, o.pool, `SELECT count(*) FROM anomaly WHERE kind = 'contradiction'`); n != len(wantEsc) {
				t.Fatalf("%d contradiction anomalies, want %d", n, len(wantEsc))
			}
			if n := count(t, o.ctx, o.pool, `SELECT count(*) FROM anomaly`); n != len(wantEsc) {
				t.Fatalf("%d anomalies, want %d", n, len(wantEsc))
			}
			if got := metric(t, o.reg, "bookrecon_contradictions_total"); got != float64(len(wantEsc)) {
				t.Fatalf("A counted %v contradictions, want %d", got, len(wantEsc))
			}
			if got := metric(t, o.reg, "bookrecon_lease_lost_total"); got != 1 {
				t.Fatalf("A counted %v lost leases, want 1", got)
			}
			if got := metric(t, o.reg, "bookrecon_resolutions_total"); got != 0 {
				t.Fatalf("A counted %v resolutions; it settled nothing", got)
			}
			res := resolutions(t, o.ctx, o.pool)
			switch {
			case tc.resolved == "" && len(res) != 0:
				t.Fatalf("resolutions %+v, want none", res)
			case tc.resolved != "" && (len(res) != 1 || res[0].Status != tc.status || res[0].ResolutionSource != tc.resolved):
				t.Fatalf("resolutions %+v, want one: %s by %s", res, tc.status, tc.resolved)
			}
		})
	}
}

// sameRow compares two reads of one attempt, next_check_at by value.
func sameRow(a, b row) bool {
	na, nb := a.NextCheck, b.NextCheck
	a.NextCheck, b.NextCheck = nil, nil
	return a == b && (na == nil) == (nb == nil) && (na == nil || na.Equal(*nb))
}

// runOnceExactly runs one round of r and wants n checks (for goroutines other than the test's).
func runOnceExactly(ctx context.Context, r *reconcile.Reconciler, n int) error {
	got, err := r.RunOnce(ctx)
	if err == nil && got != n {
		err = fmt.Errorf("RunOnce checked %d, want %d", got, n)
	}
	return err
}
