// Package check verifies a run's invariants from the database and the output topics (the
// promises of docs/design.md#promises): every unique event applied exactly once and none lost;
// every terminal attempt agrees with the provider truth; no FAILED for a booking that exists;
// exactly one attempt.resolved per terminal attempt; exactly one escalation per (attempt, reason);
// no attempt UNKNOWN past its deadline without an open escalation; every audit row, claim and
// attempt names a parent that exists (migrations.Orphans: the foreign keys 00009 dropped).
package check

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/demo"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/migrations"
	"github.com/bookrecon/bookrecon/providers"
)

// Invariant is one checked rule and its violations.
type Invariant struct {
	Name       string
	Violations int
	Examples   []string // up to five
}

// Report is the checker's verdict.
type Report struct {
	Invariants []Invariant
}

// OK reports zero violations.
func (r Report) OK() bool {
	for _, i := range r.Invariants {
		if i.Violations > 0 {
			return false
		}
	}
	return true
}

func (r Report) String() string {
	var b strings.Builder
	for _, i := range r.Invariants {
		fmt.Fprintf(&b, "%-70s %d violations", i.Name, i.Violations)
		if len(i.Examples) > 0 {
			fmt.Fprintf(&b, "  e.g. %s", strings.Join(i.Examples, "; "))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

type inv struct{ *Invariant }

func (v inv) bad(format string, args ...any) {
	v.Violations++
	if len(v.Examples) < 5 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// Input is what the run published and what the providers hold.
type Input struct {
	Run       loadgen.Output
	Providers *providers.Map
	Consumer  string // processed_event consumer of the attempts topic (group/topic)
}

// Run checks every invariant.
func Run(ctx context.Context, pool *pgxpool.Pool, brokers []string, topics demo.Topics, in Input) (Report, error) {
	var rep Report
	add := func(name string) inv {
		rep.Invariants = append(rep.Invariants, Invariant{Name: name})
		return inv{&rep.Invariants[len(rep.Invariants)-1]}
	}

	// Input event ids (unique) against processed_event and the dead letters.
	published := map[string]bool{} // tenant/eventId
	for _, r := range in.Run.Records {
		var v struct{ TenantID, EventID string }
		if json.Unmarshal(r, &v) == nil {
			published[v.TenantID+"/"+v.EventID] = true
		}
	}
	processed, err := counts(ctx, pool, `SELECT tenant_id || '/' || event_id, count(*) FROM processed_event WHERE consumer = $1 GROUP BY 1`, in.Consumer)
	if err != nil {
		return rep, err
	}
	applied, err := counts(ctx, pool, `SELECT a.tenant_id || '/' || t.event_id, count(*) FROM attempt_transition t
		JOIN booking_attempt a ON a.id = t.attempt_id WHERE t.cause = 'event' AND t.event_id IS NOT NULL GROUP BY 1`)
	if err != nil {
		return rep, err
	}
	once := add("every unique event applied exactly once (dedup row and one audited effect)")
	lost := add("no event lost (every published event has its dedup row)")
	for k := range published {
		switch n := processed[k]; {
		case n == 0:
			lost.bad("%s not processed", k)
		case n > 1:
			once.bad("%s has %d dedup rows", k, n)
		}
		if n := applied[k]; n > 1 {
			once.bad("%s applied %d times", k, n)
		}
	}

	// Attempts against the expected outcome and the provider truth.
	type att struct{ status, source, ref, provider, clientRef string }
	got := map[string]att{}
	rows, err := pool.Query(ctx, `SELECT tenant_id || '/' || idempotency_key, status, coalesce(resolution_source, ''),
		coalesce(provider_reference, ''), provider, coalesce(client_reference, '') FROM booking_attempt`)
	if err != nil {
		return rep, err
	}
	for rows.Next() {
		var k string
		var a att
		if err := rows.Scan(&k, &a.status, &a.source, &a.ref, &a.provider, &a.clientRef); err != nil {
			rows.Close()
			return rep, err
		}
		got[k] = a
	}
	rows.Close()
	exists := map[string]string{} // provider/clientRef and provider/providerRef → status
	for p, recs := range in.Run.Truth {
		for _, r := range recs {
			exists[p+"/ref/"+r.ProviderReference] = string(r.Status)
			if r.ClientReference != "" {
				exists[p+"/client/"+r.ClientReference] = string(r.Status)
			}
		}
	}
	agree := add("every terminal attempt agrees with the provider truth and the expected outcome")
	for _, e := range in.Run.Expected {
		k := e.TenantID + "/" + e.IdempotencyKey
		a, ok := got[k]
		if !ok {
			agree.bad("%s missing", k)
			continue
		}
		if a.status != e.Status || a.source != e.Source || a.ref != e.ProviderReference {
			agree.bad("%s is %s/%s/%s, want %s/%s/%s", k, a.status, a.source, a.ref, e.Status, e.Source, e.ProviderReference)
		}
	}
	noFalseFail := add("no FAILED for a booking that exists at the provider")
	for k, a := range got {
		if a.status != "FAILED" {
			continue
		}
		if s := exists[a.provider+"/client/"+a.clientRef]; a.clientRef != "" && s == "CONFIRMED" {
			noFalseFail.bad("%s FAILED but %s holds %s CONFIRMED", k, a.provider, a.clientRef)
		}
		if s := exists[a.provider+"/ref/"+a.ref]; a.ref != "" && s == "CONFIRMED" {
			noFalseFail.bad("%s FAILED but %s holds %s CONFIRMED", k, a.provider, a.ref)
		}
	}

	// Outputs on the topics.
	recs, err := demo.ReadTopics(ctx, brokers, topics.Resolutions, topics.Escalations)
	if err != nil {
		return rep, err
	}
	resolutions := map[string]map[string]bool{}
	opened := map[string]map[string]bool{}
	for _, r := range recs {
		var v struct{ EventID, EventType, TenantID, IdempotencyKey, Reason, ResolutionSource string }
		if json.Unmarshal(r.Value, &v) != nil {
			continue
		}
		k := v.TenantID + "/" + v.IdempotencyKey
		switch {
		case v.EventType == "attempt.resolved" && v.ResolutionSource != "manual":
			if resolutions[k] == nil {
				resolutions[k] = map[string]bool{}
			}
			resolutions[k][v.EventID] = true
		case v.EventType == "escalation.opened":
			if opened[k+"/"+v.Reason] == nil {
				opened[k+"/"+v.Reason] = map[string]bool{}
			}
			opened[k+"/"+v.Reason][v.EventID] = true
		}
	}
	oneRes := add("exactly one attempt.resolved per terminal attempt")
	for k, a := range got {
		n := len(resolutions[k])
		terminal := a.status == "CONFIRMED" || a.status == "FAILED"
		if terminal && n != 1 && (a.source != "manual" || n != 0) {
			oneRes.bad("%s has %d", k, n)
		}
		if !terminal && n != 0 {
			oneRes.bad("%s is %s with %d resolutions", k, a.status, n)
		}
	}
	oneEsc := add("exactly one escalation per (attempt, reason)")
	dbEsc := map[string]bool{}
	rows, err = pool.Query(ctx, `SELECT a.tenant_id || '/' || a.idempotency_key || '/' || e.reason FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id`)
	if err != nil {
		return rep, err
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return rep, err
		}
		dbEsc[k] = true
	}
	rows.Close()
	for k := range dbEsc {
		if n := len(opened[k]); n != 1 {
			oneEsc.bad("%s published %d times", k, n)
		}
	}
	for k := range opened {
		// Only this run's attempts: the topic may hold other runs' escalations.
		if _, ours := got[k[:strings.LastIndex(k, "/")]]; ours && !dbEsc[k] {
			oneEsc.bad("%s published but not recorded", k)
		}
	}

	late := add("no attempt UNKNOWN past its deadline without an open escalation")
	rows, err = pool.Query(ctx, `SELECT tenant_id || '/' || idempotency_key, provider, operation, extract(epoch FROM now() - unknown_since)::float8
		FROM booking_attempt a WHERE status = 'UNKNOWN' AND NOT EXISTS (SELECT 1 FROM escalation e WHERE e.attempt_id = a.id AND e.state = 'open')`)
	if err != nil {
		return rep, err
	}
	for rows.Next() {
		var k, prov, op string
		var age float64
		if err := rows.Scan(&k, &prov, &op, &age); err != nil {
			rows.Close()
			return rep, err
		}
		deadline := 30 * time.Minute
		if in.Providers != nil {
			if c, ok := in.Providers.Get(prov); ok {
				deadline = c.DeadlineFor(events.Operation(op))
			}
		}
		// One escalator poll of slack: the deadline fires at the first scan after it.
		if time.Duration(age*float64(time.Second)) > deadline+5*time.Second {
			late.bad("%s UNKNOWN for %.0fs (deadline %s)", k, age, deadline)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, err
	}

	refs := add("referential integrity: every audit row and claim names an attempt, every attempt an intent")
	orphans, err := migrations.Orphans(ctx, pool, 1000)
	if err != nil {
		return rep, err
	}
	for _, o := range orphans {
		refs.bad("%s", o)
	}
	return rep, nil
}

// counts runs a (key, count) query into a map.
func counts(ctx context.Context, pool *pgxpool.Pool, q string, args ...any) (map[string]int, error) {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var k string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
		out[k] = n
		return nil
	})
	return out, err
}
