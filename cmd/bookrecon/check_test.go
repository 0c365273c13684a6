package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestCheckWaitsUntilSettled: check judges a settled pipeline only. With an input record the
// ingester's group has not committed, a pending outbox row (a set-aside one is shown, not
// waited for) and an UNKNOWN attempt neither terminal nor escalated, a short --wait exits 3
// with "not settled" and what is still in flight — no invariant is reported. Once the record is
// committed, the row published and the attempt escalated, the same command settles and checks
// (here the invariants are violated: the generated run never went through the pipeline, exit 1).
func TestCheckWaitsUntilSettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool, err := postgres.Open(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, s := range []string{
		`INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t_1', 'bi_1')`,
		`INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key,
			provider, status, timeout_class, first_event_at, window_start, unknown_since)
			VALUES ('01900000-0000-7000-8000-000000000001', 't_1', 'bi_1', 'BOOK', 'bi_1', 1, 'book:bi_1:v1', 'sim-hotels',
			'UNKNOWN', 'read_timeout', now(), now(), now())`,
		`INSERT INTO outbox (id, topic, record_key, value, event_id, set_aside_at, publish_failures, error_class, last_error) VALUES
			(1, 'res', 'k', 'v', 'e1', NULL, 0, NULL, NULL),
			(2, 'res', 'k2', 'v', 'e2', now(), 1, 'record_too_large', 'MESSAGE_TOO_LARGE')`,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	sfx := kafkatest.Suffix()
	names := topics.FromSuffix(sfx)
	kafkatest.CreateTopics(t, 1, names.All()...)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: names.Attempts, Key: []byte("bi_1"), Value: []byte(`{}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := loadgen.Generate(loadgen.Config{Intents: 1, Seed: 1, Start: time.Now(), Spacing: time.Millisecond, Mix: loadgen.DefaultMix}).Write(dir); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pipelinetest.BuildBinaries(t, "bookrecon"), "bookrecon")
	group := "check-" + sfx
	env := []string{"BOOKRECON_DATABASE_URL=" + url, "BOOKRECON_TOPIC_SUFFIX=" + sfx,
		"BOOKRECON_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(), ",")}

	stdout, stderr, code := pipelinetest.RunBinary(t, 60*time.Second, bin, env, "check", "--input", dir, "--group", group, "--wait", "3s")
	inFlight := "consumer lag 1, outbox backlog 1 (1 set aside, not waited for: bookrecon outbox list), 1 UNKNOWN neither terminal nor escalated"
	wantErr := "bookrecon: check: not settled within 3s: " + inFlight + "; the invariants were not checked"
	if code != 3 || !strings.HasPrefix(stderr, wantErr) { // exitNotSettled, the README's exit status
		t.Errorf("not settled: exit %d, stderr %q; want 3 and %q", code, stderr, wantErr)
	}
	// The first line's age is 0s, or later when a measurement met a retriable Kafka error
	// (COORDINATOR_NOT_AVAILABLE on a fresh broker) and measured again one poll later.
	first := regexp.MustCompile(`^waiting up to 3s for the pipeline to settle \(--wait\)\n +[0-2]s  ` + regexp.QuoteMeta(inFlight) + "\n")
	if !first.MatchString(stdout) || strings.Contains(stdout, "violations") {
		t.Errorf("not settled: stdout %q; want the progress lines and no invariant", stdout)
	}

	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: names.Attempts, Partition: 0, At: 1, LeaderEpoch: -1})
	if err := kafkatest.Admin(t).CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`DELETE FROM outbox WHERE id = 1`, // published: the relay deletes the row
		`INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason, state, opened_at)
			VALUES (gen_random_uuid(), '01900000-0000-7000-8000-000000000001', 't_1', 'deadline_exceeded', 'open', now())`,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code = pipelinetest.RunBinary(t, 60*time.Second, bin, env, "check", "--input", dir, "--group", group, "--wait", "30s")
	if code != 1 || stderr != "bookrecon: invariants violated\n" || !strings.Contains(stdout, "settled; checking\n") ||
		!strings.Contains(stdout, "violations") {
		t.Errorf("settled: exit %d, stderr %q, stdout %q; want 1, invariants violated after the report", code, stderr, stdout)
	}
}
