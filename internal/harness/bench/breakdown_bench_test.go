package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
)

// BenchmarkIngestBreakdown is where the time and the WAL of the ingester's PostgreSQL work go,
// per kind of write (docs/performance.md): the ceiling line of BenchmarkIngest (ingest.Applier,
// 4,000 records per transaction, decoded beforehand) run on the happy and on the realistic mix,
// every statement timed as the client sees it (sent to result read, by a pgx tracer) and
// grouped by verb and table, and the run's WAL by relation and record type (walMeter).
//
//	go test -run='^$' -bench=IngestBreakdown -benchtime=1x ./internal/bench/
//
// BOOKRECON_BENCH_EVENTS sets the records per mix (default 200,000), BOOKRECON_BENCH_MIX=happy
// or =realistic runs one mix alone.
func BenchmarkIngestBreakdown(b *testing.B) {
	total := ingestEnvInt("BOOKRECON_BENCH_EVENTS", 200000)
	ctx := context.Background()
	only := os.Getenv("BOOKRECON_BENCH_MIX") // "happy" or "realistic": that mix alone
	for _, mix := range []struct {
		name string
		mix  loadgen.Mix
	}{{"happy", happyMix}, {"realistic", realisticMix}} {
		if only != "" && only != mix.name {
			continue
		}
		w := newWorkload(b, total, mix.mix)
		for range b.N {
			tr := &stmtTracer{byKind: map[string]*stmtStat{}, bySQL: map[string]*stmtStat{}}
			load := loadAverage()
			r := ingestApplier(b, ctx, w.gen, len(w.gen.Records), 4000, false, tr)
			wall := float64(r.events) / r.perSec // seconds of the timed apply
			fmt.Printf("\ningest breakdown, %s mix: %d records, %d unique events, ingest.Applier 4,000/tx: %.0f events/s, %s; load average %s → %s\n",
				mix.name, len(w.gen.Records), r.events, r.perSec, r.wal.perEvent(r.events), load, loadAverage())
			fmt.Print(tr.table(r.events, wall))
			fmt.Print(r.wal.table(r.events))
		}
	}
}

// stmtTracer times every statement, COPY included, by kind (stmtKind). Safe for concurrent use.
type stmtTracer struct {
	mu     sync.Mutex
	byKind map[string]*stmtStat
	bySQL  map[string]*stmtStat // the same by statement text (whitespace collapsed)
}

type stmtStat struct {
	n int
	d time.Duration
}

type stmtTraceKey struct{}

type stmtTraceStart struct {
	kind, sql string
	at        time.Time
}

func (t *stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtTraceKey{}, stmtTraceStart{stmtKind(d.SQL), d.SQL, time.Now()})
}

func (t *stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

func (t *stmtTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	k := "copy " + strings.Join(d.TableName, ".")
	return context.WithValue(ctx, stmtTraceKey{}, stmtTraceStart{k, k, time.Now()})
}

func (t *stmtTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	t.end(ctx)
}

func (t *stmtTracer) end(ctx context.Context) {
	s, ok := ctx.Value(stmtTraceKey{}).(stmtTraceStart)
	if !ok {
		return
	}
	d := time.Since(s.at)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range []struct {
		m map[string]*stmtStat
		k string
	}{{t.byKind, s.kind}, {t.bySQL, s.sql}} {
		st := k.m[k.k]
		if st == nil {
			st = &stmtStat{}
			k.m[k.k] = st
		}
		st.n++
		st.d += d
	}
}

var (
	stmtSpace   = regexp.MustCompile(`\s+`)
	stmtComment = regexp.MustCompile(`--[^\n]*`)
	stmtWrite   = regexp.MustCompile(`\b(insert into|update|delete from) ([a-z_][a-z0-9_.]*)`)
	stmtFrom    = regexp.MustCompile(`\bfrom ([a-z_][a-z0-9_.]*)`)
	stmtParen   = regexp.MustCompile(`\([^()]*\)`)
)

// stmtKind names a statement by its verb and table: "insert booking_attempt", "select
// booking_attempt", "savepoint", "commit"; a WITH statement by its first write, a SELECT by its
// own FROM (not a subquery's).
func stmtKind(sql string) string {
	q := strings.TrimSpace(strings.ToLower(stmtSpace.ReplaceAllString(stmtComment.ReplaceAllString(sql, ""), " ")))
	verb, _, _ := strings.Cut(q, " ")
	switch verb {
	case "begin", "commit", "rollback", "savepoint", "release":
		return verb
	case "insert", "update", "delete", "with":
		if m := stmtWrite.FindStringSubmatch(q); m != nil {
			v, _, _ := strings.Cut(m[1], " ")
			return v + " " + m[2]
		}
	}
	for top := ""; top != q; { // the FROM of the statement, not of a subquery
		top, q = q, stmtParen.ReplaceAllString(q, "")
	}
	if m := stmtFrom.FindStringSubmatch(q); m != nil {
		return verb + " " + m[1]
	}
	return verb
}

// table prints the statements per 1,000 events and their time, largest first, against the
// wall time of the run (seconds): what is left is the Go side between statements.
func (t *stmtTracer) table(events int, wall float64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kinds := make([]string, 0, len(t.byKind))
	var sum time.Duration
	for k, s := range t.byKind {
		kinds = append(kinds, k)
		sum += s.d
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(t.byKind[b].d, t.byKind[a].d), strings.Compare(a, b)) })
	per := 1000 / float64(events)
	var sb strings.Builder
	fmt.Fprintf(&sb, "    time per 1,000 events: %.1f ms wall, %.1f ms in statements (client-side: sent to result read), %.1f ms between them (Go)\n",
		wall*1000*per, float64(sum.Microseconds())/1000*per, (wall*1000-float64(sum.Microseconds())/1000)*per)
	fmt.Fprintf(&sb, "      %-36s %10s %10s %8s\n", "statement", "n/1k ev", "ms/1k ev", "of wall")
	for _, k := range kinds {
		s := t.byKind[k]
		ms := float64(s.d.Microseconds()) / 1000
		fmt.Fprintf(&sb, "      %-36s %10.1f %10.2f %7.1f%%\n", k, float64(s.n)*per, ms*per, ms/(wall*1000)*100)
	}
	sqls := make([]string, 0, len(t.bySQL))
	for q := range t.bySQL {
		sqls = append(sqls, q)
	}
	slices.SortFunc(sqls, func(a, b string) int { return cmp.Or(cmp.Compare(t.bySQL[b].d, t.bySQL[a].d), strings.Compare(a, b)) })
	fmt.Fprintf(&sb, "      the 5 statements taking the most time (n/1k ev, ms/1k ev, mean µs):\n")
	for _, q := range sqls[:min(5, len(sqls))] {
		s := t.bySQL[q]
		text := strings.TrimSpace(stmtSpace.ReplaceAllString(q, " "))
		if len(text) > 180 {
			text = text[:60] + " … " + text[len(text)-120:]
		}
		fmt.Fprintf(&sb, "        %7.1f %8.2f %7.0f  %s\n", float64(s.n)*per, float64(s.d.Microseconds())/1000*per, float64(s.d.Microseconds())/float64(s.n), text)
	}
	return sb.String()
}
