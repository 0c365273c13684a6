package demo_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/harness/demo"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/query"
)

// TestSampleEndToEnd runs the whole pipeline — simulator, ingester, reconciler, escalator — on
// the sample through the real broker, paced as samples/README.md says, and requires the end
// state of expected.json exactly: all 29 attempts, the 11 escalations each published once and no
// other, the 10 dead letters, and the counts read from /metrics.
func TestSampleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: about two minutes")
	}
	t.Parallel()
	h := pipelinetest.New(t, 3)
	dir, err := samples.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tokenDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{
		Brokers: kafkatest.Brokers(), DatabaseURL: h.DBURL, SamplesDir: dir, Topics: h.Topics, Group: h.Group,
		SimAddr: "127.0.0.1:0", IngesterAddr: "127.0.0.1:0", ReconcilerAddr: "127.0.0.1:0", EscalatorAddr: "127.0.0.1:0", QueryAddr: "127.0.0.1:0", QueryAdminAddr: "127.0.0.1:0",
		TokenDir: tokenDir, Out: &out,
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("report:\n%s", res.Report)
	if !res.Report.OK() {
		t.Fatalf("the sample's end state differs from expected.json:\n%s", res.Report)
	}
	if n := len(res.Report.Lines); n != 25 {
		t.Errorf("report has %d lines, want 23 scenarios + dead letters + counts", n)
	}

	// The query API's token: in its file only (mode 0600), its hash in the tokens file, named
	// by the curl line and never printed.
	tok, err := os.ReadFile(filepath.Join(tokenDir, "token"))
	st, serr := os.Stat(filepath.Join(tokenDir, "token"))
	f, ferr := auth.ReadFile(filepath.Join(tokenDir, "tokens.yaml"))
	token := strings.TrimSpace(string(tok))
	if err != nil || serr != nil || ferr != nil || st.Mode().Perm() != 0o600 || len(f.Tokens) != 1 || f.Tokens[0].SHA256 != auth.Hash(token) ||
		f.Tokens[0].Tenant != "t_globetrek" || res.TokenFile != filepath.Join(tokenDir, "token") {
		t.Errorf("token file %v %v, tokens file %+v %v, result %s", err, serr, f, ferr, res.TokenFile)
	}
	if strings.Contains(out.String(), token) || !strings.Contains(out.String(), `curl -H "Authorization: Bearer $(cat `+res.TokenFile+`)" `+res.QueryURL+"/v1/tenants/t_globetrek/intents/bi_sc03") {
		t.Errorf("the demo's output shows the token, or no curl line:\n%s", out.String())
	}

	// What booking services see through the query API on the end state.
	for _, c := range []struct {
		intent string
		want   query.IntentStatus
		reason attempt.GateReason
	}{
		{"bi_sc03", query.IntentStatus{Status: "confirmed", LatestVersion: 1}, attempt.GateEarlierConfirmed},
		{"bi_sc05", query.IntentStatus{Status: "failed", CanBuyAgain: true, LatestVersion: 1}, attempt.GateSafeRetry},
		{"bi_sc08", query.IntentStatus{Status: "being_verified", LatestVersion: 1}, attempt.GateEarlierUnknown},
		{"bi_sc13", query.IntentStatus{Status: "failed", LatestVersion: 1}, attempt.GateNotRetryable},
		{"bi_sc18", query.IntentStatus{Status: "confirmed", LatestVersion: 2}, attempt.GateEarlierConfirmed},
	} {
		st, gate, err := query.Status(ctx, h.Pool, h.Providers, "t_globetrek", c.intent, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", c.intent, err)
		}
		c.want.TenantID, c.want.BookingIntentID = "t_globetrek", c.intent
		if st != c.want || gate.Reason != c.reason {
			t.Errorf("%s: status %+v gate %s; want %+v gate %s", c.intent, st, gate.Reason, c.want, c.reason)
		}
	}
}

// TestSampleBehindPgBouncer is TestSampleEndToEnd with every service — ingester, reconciler,
// escalator, query API, each with its own pool as its binary opens it — behind Debian's
// PgBouncer in transaction mode with pgtest.BouncerPoolSize server connections
// (BOOKRECON_DATABASE_POOLER=transaction), on an empty database migrated over the direct URL
// (BOOKRECON_MIGRATE_DATABASE_URL): the end state is expected.json's exactly, and no statement
// failed for a prepared statement (42P05 already exists, 26000 does not exist).
func TestSampleBehindPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: about two minutes")
	}
	t.Parallel()
	h := pipelinetest.New(t, 3)
	direct := pgtest.NewEmptyURL(t)
	bouncer := pgtest.Bouncer(t, direct)
	dir, err := samples.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var logs logtest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{
		Brokers: kafkatest.Brokers(), DatabaseURL: bouncer, MigrateDatabaseURL: direct, Pooler: postgres.PoolerTransaction,
		SamplesDir: dir, Topics: h.Topics, Group: h.Group,
		SimAddr: "127.0.0.1:0", IngesterAddr: "127.0.0.1:0", ReconcilerAddr: "127.0.0.1:0", EscalatorAddr: "127.0.0.1:0", QueryAddr: "127.0.0.1:0", QueryAdminAddr: "127.0.0.1:0",
		Out: &out, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s\nlogs:\n%s", err, out.String(), logs.String())
	}
	t.Logf("report:\n%s", res.Report)
	if !res.Report.OK() {
		t.Errorf("the sample's end state differs from expected.json:\n%s", res.Report)
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "SQLSTATE 42P05") || strings.Contains(line, "SQLSTATE 26000") {
			t.Errorf("a statement failed behind the pooler: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("warnings and errors:\n%s", logs.String())
	}
	// One relay publishes at a time (the outbox_lease row, no session state): each row once.
	assertEachRowPublishedOnce(ctx, t, t.Errorf, direct, h.Topics)
}

// assertEachRowPublishedOnce reports (through fail) unless the output topics hold exactly one
// record per outbox row of theirs: one relay published, once.
func assertEachRowPublishedOnce(ctx context.Context, t *testing.T, fail func(string, ...any), dbURL string, tp demo.Topics) {
	t.Helper()
	topics := []string{tp.Resolutions, tp.Escalations, tp.AttemptsDLQ}
	recs, err := demo.ReadTopics(ctx, kafkatest.Brokers(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.Open(ctx, dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_fact WHERE topic = ANY($1)`, topics).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if len(recs) != rows {
		fail("assertEachRowPublishedOnce: %d records on the output topics for %d outbox facts: more than one relay published", len(recs), rows)
	}
}
