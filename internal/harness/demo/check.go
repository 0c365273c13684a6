package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

// Expected is samples/expected.json.
type Expected = samples.Expected

// LoadExpected reads expected.json.
func LoadExpected(path string) (*Expected, error) { return samples.LoadExpected(path) }

// Line is one line of the report: a scenario (sc01…sc23) or a group check.
type Line struct {
	Name    string
	OK      bool
	Reasons []string
}

// Report is the demo's verdict.
type Report struct {
	Lines []Line
}

// OK reports whether every line passed.
func (r Report) OK() bool {
	for _, l := range r.Lines {
		if !l.OK {
			return false
		}
	}
	return true
}

// String renders one line per check, ✓ or ✗ with the reasons.
func (r Report) String() string {
	var b strings.Builder
	for _, l := range r.Lines {
		mark := "✓"
		if !l.OK {
			mark = "✗"
		}
		fmt.Fprintf(&b, "%s %s", mark, l.Name)
		if len(l.Reasons) > 0 {
			fmt.Fprintf(&b, "  — %s", strings.Join(l.Reasons, "; "))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Observed is what the pipeline produced, read from the database, the topics and /metrics.
type Observed struct {
	Attempts    map[string][3]string                      // tenant/key → status, source, reference
	Escalations map[string][2]string                      // tenant/key/reason → state, closedBy
	Opened      map[string]int                            // tenant/key/reason → distinct escalation.opened eventIds on the topic
	Resolutions map[string]int                            // tenant/key → distinct attempt.resolved eventIds on the topic
	DeadLetters map[string]string                         // source partition/offset → eventId + " " + reason
	Counters    map[string]float64                        // counts from /metrics, by expected.json count name
	Extra       []string                                  // anything else worth reporting
	ManualAudit map[string]struct{ Actor, Reason string } // tenant/key → a manual transition's actor and reason
}

var scenarioRe = regexp.MustCompile(`sc(\d+)`)

// scenarioOf maps an attempt to its scenario: the scNN of its key; tenant t_sunway is sc23.
func scenarioOf(tenant, key string) string {
	if tenant == "t_sunway" {
		return "sc23"
	}
	if m := scenarioRe.FindStringSubmatch(key); m != nil {
		return "sc" + m[1]
	}
	return "other"
}

// Compare checks obs against exp, one line per scenario, then dead letters and counts.
func Compare(exp *Expected, obs *Observed) Report {
	lines := map[string]*Line{}
	line := func(name string) *Line {
		if lines[name] == nil {
			lines[name] = &Line{Name: name, OK: true}
		}
		return lines[name]
	}
	fail := func(l *Line, format string, args ...any) {
		l.OK = false
		l.Reasons = append(l.Reasons, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, a := range exp.Attempts {
		k := a.TenantID + "/" + a.IdempotencyKey
		seen[k] = true
		l := line(scenarioOf(a.TenantID, a.IdempotencyKey))
		got, ok := obs.Attempts[k]
		if !ok {
			fail(l, "%s missing", a.IdempotencyKey)
			continue
		}
		want := [3]string{a.Status, a.ResolutionSource, a.ProviderReference}
		if got != want {
			fail(l, "%s is %s/%s/%s, want %s/%s/%s", a.IdempotencyKey, got[0], or(got[1]), or(got[2]), want[0], or(want[1]), or(want[2]))
		}
		terminal := a.Status == "CONFIRMED" || a.Status == "FAILED"
		if n := obs.Resolutions[k]; terminal && n != 1 {
			fail(l, "%s has %d resolutions, want 1", a.IdempotencyKey, n)
		} else if !terminal && n != 0 {
			fail(l, "%s has %d resolutions, want 0", a.IdempotencyKey, n)
		}
		if a.ResolutionSource == "manual" {
			if m, ok := obs.ManualAudit[k]; !ok || m.Actor == "" || m.Reason == "" {
				fail(l, "%s: manual decision's actor and reason not in the audit trail", a.IdempotencyKey)
			}
		}
	}
	for k := range obs.Attempts {
		if !seen[k] {
			parts := strings.SplitN(k, "/", 2)
			fail(line(scenarioOf(parts[0], parts[1])), "unexpected attempt %s", k)
		}
	}
	expEsc := map[string]bool{}
	for _, e := range exp.Escalations {
		k := e.TenantID + "/" + e.IdempotencyKey + "/" + e.Reason
		expEsc[k] = true
		l := line(scenarioOf(e.TenantID, e.IdempotencyKey))
		got, ok := obs.Escalations[k]
		if !ok {
			fail(l, "no %s escalation on %s", e.Reason, e.IdempotencyKey)
			continue
		}
		if got[0] != e.State || (e.ClosedBy != "" && got[1] != e.ClosedBy) {
			fail(l, "%s escalation on %s is %s/%s, want %s/%s", e.Reason, e.IdempotencyKey, got[0], or(got[1]), e.State, or(e.ClosedBy))
		}
		if n := obs.Opened[k]; n != 1 {
			fail(l, "%s escalation on %s published %d times, want 1", e.Reason, e.IdempotencyKey, n)
		}
	}
	for k := range obs.Escalations {
		if !expEsc[k] {
			parts := strings.SplitN(k, "/", 3)
			fail(line(scenarioOf(parts[0], parts[1])), "unexpected %s escalation on %s", parts[2], parts[1])
		}
	}
	for k, n := range obs.Opened {
		if !expEsc[k] && n > 0 {
			if _, inDB := obs.Escalations[k]; !inDB {
				parts := strings.SplitN(k, "/", 3)
				fail(line(scenarioOf(parts[0], parts[1])), "unexpected %s escalation published on %s", parts[2], parts[1])
			}
		}
	}
	var out Report
	names := make([]string, 0, len(lines))
	for n := range lines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out.Lines = append(out.Lines, *lines[n])
	}

	dl := Line{Name: fmt.Sprintf("dead letters (%d)", len(exp.DeadLetters)), OK: true}
	var want, got []string
	for _, d := range exp.DeadLetters {
		id := "<no eventId>"
		if d.EventID != nil {
			id = *d.EventID
		}
		want = append(want, id+" "+d.Reason)
	}
	for _, v := range obs.DeadLetters {
		got = append(got, v)
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(want, ",") != strings.Join(got, ",") {
		dl.OK = false
		dl.Reasons = append(dl.Reasons, fmt.Sprintf("got %v, want %v", got, want))
	}
	out.Lines = append(out.Lines, dl)

	cl := Line{Name: "counts", OK: true}
	check := func(name string, want int) {
		if g := obs.Counters[name]; int(g) != want || g != float64(int(g)) {
			cl.OK = false
			cl.Reasons = append(cl.Reasons, fmt.Sprintf("%s = %v, want %d", name, g, want))
		}
	}
	check("duplicateDeliveries.booking.attempts.v1", exp.Counts.DuplicateDeliveries["booking.attempts.v1"])
	check("duplicateDeliveries.booking.manual-decisions.v1", exp.Counts.DuplicateDeliveries["booking.manual-decisions.v1"])
	check("idempotentRepeats", exp.Counts.IdempotentRepeats)
	check("keyConflicts", exp.Counts.KeyConflicts)
	check("blindRetries", exp.Counts.BlindRetries)
	check("resolutionEvents", exp.Counts.ResolutionEvents)
	check("escalations", exp.Counts.Escalations)
	check("escalationsClosed", exp.Counts.EscalationsClosed)
	check("deadLetters", exp.Counts.DeadLetters)
	check("attempts", exp.Counts.Attempts)
	check("terminalAttempts", exp.Counts.TerminalAttempts)
	out.Lines = append(out.Lines, cl)
	return out
}

func or(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Observe reads what the pipeline produced from the database and the output topics.
func Observe(ctx context.Context, pool *pgxpool.Pool, brokers []string, topics Topics) (*Observed, error) {
	obs := &Observed{Attempts: map[string][3]string{}, Escalations: map[string][2]string{}, Opened: map[string]int{},
		Resolutions: map[string]int{}, DeadLetters: map[string]string{}, Counters: map[string]float64{},
		ManualAudit: map[string]struct{ Actor, Reason string }{}}
	rows, err := pool.Query(ctx, `SELECT tenant_id || '/' || idempotency_key, status, coalesce(resolution_source, ''), coalesce(provider_reference, '') FROM booking_attempt`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k string
		var v [3]string
		if err := rows.Scan(&k, &v[0], &v[1], &v[2]); err != nil {
			rows.Close()
			return nil, err
		}
		// expected.json lists a provider reference only where the attempt settled with one
		obs.Attempts[k] = v
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT a.tenant_id || '/' || a.idempotency_key || '/' || e.reason, e.state, coalesce(e.closed_by, '')
		FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k string
		var v [2]string
		if err := rows.Scan(&k, &v[0], &v[1]); err != nil {
			rows.Close()
			return nil, err
		}
		obs.Escalations[k] = v
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT a.tenant_id || '/' || a.idempotency_key, coalesce(t.actor, ''), coalesce(t.reason, '')
		FROM attempt_transition t JOIN booking_attempt a ON a.id = t.attempt_id WHERE t.cause = 'manual'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k, actor, reason string
		if err := rows.Scan(&k, &actor, &reason); err != nil {
			rows.Close()
			return nil, err
		}
		obs.ManualAudit[k] = struct{ Actor, Reason string }{actor, reason}
	}
	rows.Close()
	var terminal, attempts, closed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('CONFIRMED','FAILED')), count(*) FROM booking_attempt`).Scan(&terminal, &attempts); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM escalation WHERE state = 'closed'`).Scan(&closed); err != nil {
		return nil, err
	}
	obs.Counters["terminalAttempts"] = float64(terminal)
	obs.Counters["attempts"] = float64(attempts)
	obs.Counters["escalationsClosed"] = float64(closed)

	recs, err := ReadTopics(ctx, brokers, topics.Resolutions, topics.Escalations, topics.AttemptsDLQ)
	if err != nil {
		return nil, err
	}
	resIDs := map[string]map[string]bool{}
	openIDs := map[string]map[string]bool{}
	add := func(m map[string]map[string]bool, k, id string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][id] = true
	}
	for _, r := range recs {
		var v struct {
			EventID, EventType, TenantID, IdempotencyKey, Reason string
		}
		switch r.Topic {
		case topics.AttemptsDLQ:
			_ = json.Unmarshal(r.Value, &v)
			id := v.EventID
			if id == "" {
				id = "<no eventId>"
			}
			obs.DeadLetters[header(r, "bookrecon.source.partition")+"/"+header(r, "bookrecon.source.offset")] = id + " " + header(r, "bookrecon.dlq.reason")
			continue
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			obs.Extra = append(obs.Extra, "undecodable output record on "+r.Topic)
			continue
		}
		switch v.EventType {
		case "attempt.resolved":
			add(resIDs, v.TenantID+"/"+v.IdempotencyKey, v.EventID)
		case "escalation.opened":
			add(openIDs, v.TenantID+"/"+v.IdempotencyKey+"/"+v.Reason, v.EventID)
		}
	}
	total := 0
	for k, ids := range resIDs {
		obs.Resolutions[k] = len(ids)
		total += len(ids)
	}
	obs.Counters["resolutionEvents"] = float64(total)
	opened := 0
	for k, ids := range openIDs {
		obs.Opened[k] = len(ids)
		opened += len(ids)
	}
	obs.Counters["escalations"] = float64(opened)
	obs.Counters["deadLetters"] = float64(len(obs.DeadLetters))
	return obs, nil
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// ReadTopics reads every record currently in the topics, from the start to the high watermark.
func ReadTopics(ctx context.Context, brokers []string, topics ...string) ([]*kgo.Record, error) {
	c, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	offs, err := kadm.NewClient(c).ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends := map[string]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			ends[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	var out []*kgo.Record
	got := map[string]int64{}
	for {
		done := true
		for tp, end := range ends {
			if got[tp] < end {
				done = false
			}
		}
		if done {
			return out, nil
		}
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			tp := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			got[tp] = r.Offset + 1
		})
	}
}
