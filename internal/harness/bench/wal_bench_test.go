package bench

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// stmts are the bench's named statements (sql/*.sql), prepared by TestStatementsPrepare.
var stmts = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// TestStatementsPrepare prepares every statement of sql/*.sql on a migrated database with
// pg_walinspect created (what walMeter does), so a typo fails here rather than in a long
// benchmark. It is pgtest.PrepareStatements on the admin connection the meter uses: creating
// the extension needs it.
func TestStatementsPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	conn := adminConn(t, t.Context(), pgtest.NewURL(t))
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), stmts.SQL("wal_extension_create")); err != nil {
		t.Skipf("pg_walinspect cannot be created here (the meter then reports pg_stat_wal alone): %v", err)
	}
	for _, name := range stmts.Names() {
		if _, err := conn.Prepare(t.Context(), name, stmts.SQL(name)); err != nil {
			t.Errorf("statement %s does not prepare: %v", name, err)
		}
	}
}

// adminConn connects to the database of dbURL as the server's admin user (pgtest.URL: test
// databases belong to an unprivileged role).
func adminConn(t testing.TB, ctx context.Context, dbURL string) *pgx.Conn {
	db, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	admin.Path = db.Path
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// walMeter measures the WAL a run writes to one database, two ways:
//   - pg_stat_wal's wal_bytes delta, read once the database's other sessions have ended (their
//     statistics reach pg_stat_wal when they end). It is cluster-wide: whatever other databases
//     of the server write meanwhile is in it.
//   - this database's own share, from pg_walinspect over the run's LSN range: the records of its
//     relations and the commits of their transactions, by relation and record type. This needs
//     a superuser (a temporary replication slot keeps the WAL until it is read); without one,
//     only the first figure is reported.
type walMeter struct {
	conn       *pgx.Conn
	startBytes int64
	startLSN   string
	dbOID      int64
	inspect    string // "" when pg_walinspect can read the run's WAL, else why not
}

// walResult is what a walMeter measured: bytes over the run, and this database's bytes by
// relation (nil when pg_walinspect was not available).
type walResult struct {
	statWAL  int64 // pg_stat_wal wal_bytes delta, cluster-wide
	own      int64 // this database's records (pg_walinspect)
	ownFPI   int64 // of which full-page images
	byRecord []walRecord
	inspect  string
}

// walRecord is the WAL of one kind of record on one relation.
type walRecord struct {
	relation, record string
	count, bytes     int64
	fpi              int64
}

// startWAL opens the meter's connection to the database of dbURL (adminConn), runs a CHECKPOINT
// and takes the start position. Close it with stop. BOOKRECON_BENCH_WALINSPECT=off leaves pg_walinspect out
// (pg_stat_wal alone): reading a line's WAL back takes minutes on a loaded machine.
func startWAL(b testing.TB, ctx context.Context, dbURL string) *walMeter {
	conn := adminConn(b, ctx, dbURL)
	w := &walMeter{conn: conn}
	if os.Getenv("BOOKRECON_BENCH_WALINSPECT") == "off" {
		w.inspect = "pg_walinspect off (BOOKRECON_BENCH_WALINSPECT=off)"
	} else if _, err := conn.Exec(ctx, stmts.SQL("wal_extension_create")); err != nil {
		w.inspect = "pg_walinspect unavailable: " + err.Error()
	} else if _, err := conn.Exec(ctx, stmts.SQL("wal_reserve"), "bench_"+strings.ReplaceAll(uuid.NewString(), "-", "")); err != nil {
		w.inspect = "cannot reserve WAL (a temporary replication slot): " + err.Error()
	}
	// Every line starts from a checkpoint: without it a line paid, by its place in the run, for
	// the dirty buffers and the full-page images of the lines before it (docs/performance.md,
	// "Lanes": a line run third met a checkpoint started during the one before).
	if _, err := conn.Exec(ctx, stmts.SQL("wal_checkpoint")); err != nil {
		b.Fatal(err)
	}
	if err := conn.QueryRow(ctx, stmts.SQL("wal_position")).Scan(&w.startBytes, &w.startLSN, &w.dbOID); err != nil {
		b.Fatal(err)
	}
	return w
}

// stop waits (up to 30 s) until the database's other sessions have ended, reads the end
// position and, where it can, this database's WAL by relation; then it closes the meter.
func (w *walMeter) stop(b testing.TB, ctx context.Context) walResult {
	defer w.conn.Close(ctx)
	var endLSN string
	var dbOID int64
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := w.conn.QueryRow(ctx, stmts.SQL("wal_backends_count")).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
	}
	res := walResult{inspect: w.inspect}
	var end int64
	if err := w.conn.QueryRow(ctx, stmts.SQL("wal_position")).Scan(&end, &endLSN, &dbOID); err != nil {
		b.Fatal(err)
	}
	res.statWAL = end - w.startBytes
	if n > 0 && res.inspect == "" {
		res.inspect = fmt.Sprintf("%d sessions still open after 30 s: their last second of WAL may be missing from pg_stat_wal", n)
	}
	if w.inspect != "" {
		return res
	}
	rows, err := w.conn.Query(ctx, stmts.SQL("wal_records_by_relation"), w.startLSN, endLSN, w.dbOID)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var r walRecord
		if err := rows.Scan(&r.relation, &r.record, &r.count, &r.bytes, &r.fpi); err != nil {
			b.Fatal(err)
		}
		res.byRecord = append(res.byRecord, r)
		res.own += r.bytes
		res.ownFPI += r.fpi
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return res
}

// perEvent is the cluster-wide figure and, when measured, this database's, per event: "1234
// B/event (this database 1200)".
func (r walResult) perEvent(events int) string {
	s := fmt.Sprintf("%6.0f B/event WAL", float64(r.statWAL)/float64(events))
	if r.byRecord != nil {
		s += fmt.Sprintf(" (this database %.0f)", float64(r.own)/float64(events))
	}
	return s
}

// table prints this database's WAL per event by relation (and its top record types), largest
// first, down to 1% of the total; nothing when pg_walinspect was not available.
func (r walResult) table(events int) string {
	if r.byRecord == nil {
		return "    WAL by relation: not measured (" + r.inspect + ")\n"
	}
	type rel struct {
		name       string
		bytes, fpi int64
		count      int64
		records    []walRecord
	}
	byRel := map[string]*rel{}
	for _, x := range r.byRecord {
		e := byRel[x.relation]
		if e == nil {
			e = &rel{name: x.relation}
			byRel[x.relation] = e
		}
		e.bytes, e.fpi, e.count = e.bytes+x.bytes, e.fpi+x.fpi, e.count+x.count
		e.records = append(e.records, x)
	}
	rels := make([]*rel, 0, len(byRel))
	for _, e := range byRel {
		slices.SortFunc(e.records, func(a, b walRecord) int { return cmp.Compare(b.bytes, a.bytes) })
		rels = append(rels, e)
	}
	slices.SortFunc(rels, func(a, b *rel) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), strings.Compare(a.name, b.name)) })
	ev := float64(events)
	var sb strings.Builder
	fmt.Fprintf(&sb, "    WAL by relation, this database (pg_walinspect): %.0f B/event, of which full-page images %.0f\n", float64(r.own)/ev, float64(r.ownFPI)/ev)
	fmt.Fprintf(&sb, "      %-44s %8s %8s %9s  %s\n", "relation", "B/event", "FPI B/ev", "recs/ev", "largest record types (B/event)")
	var rest int64
	for _, e := range rels {
		if e.bytes*100 < r.own {
			rest += e.bytes
			continue
		}
		var top []string
		for _, x := range e.records[:min(3, len(e.records))] {
			top = append(top, fmt.Sprintf("%s %.0f", x.record, float64(x.bytes)/ev))
		}
		fmt.Fprintf(&sb, "      %-44s %8.0f %8.0f %9.2f  %s\n", e.name, float64(e.bytes)/ev, float64(e.fpi)/ev, float64(e.count)/ev, strings.Join(top, ", "))
	}
	if rest > 0 {
		fmt.Fprintf(&sb, "      %-44s %8.0f\n", "(relations under 1% each)", float64(rest)/ev)
	}
	return sb.String()
}
