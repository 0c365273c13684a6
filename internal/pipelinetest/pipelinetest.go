// Package pipelinetest is the shared harness of the integration and end-to-end tests: its own
// topics on the real broker, its own migrated database, the sample capability map and
// expected outcome, and helpers to publish the sample and wait for the pipeline to go quiet.
package pipelinetest

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/samples"
	"github.com/bookrecon/bookrecon/providers"
)

// Expected is samples/expected.json.
type Expected struct {
	Attempts []struct {
		TenantID          string `json:"tenantId"`
		IdempotencyKey    string `json:"idempotencyKey"`
		Status            string `json:"status"`
		ResolutionSource  string `json:"resolutionSource"`
		ProviderReference string `json:"providerReference"`
	} `json:"attempts"`
	Escalations []struct {
		TenantID       string `json:"tenantId"`
		IdempotencyKey string `json:"idempotencyKey"`
		Reason         string `json:"reason"`
		State          string `json:"state"`
		ClosedBy       string `json:"closedBy"`
	} `json:"escalations"`
	DeadLetters []struct {
		EventID *string `json:"eventId"`
		Reason  string  `json:"reason"`
	} `json:"deadLetters"`
	Counts struct {
		UniqueValidEvents   int            `json:"uniqueValidEvents"`
		DuplicateDeliveries map[string]int `json:"duplicateDeliveries"`
		IdempotentRepeats   int            `json:"idempotentRepeats"`
		Attempts            int            `json:"attempts"`
		TerminalAttempts    int            `json:"terminalAttempts"`
		ResolutionEvents    int            `json:"resolutionEvents"`
		KeyConflicts        int            `json:"keyConflicts"`
		BlindRetries        int            `json:"blindRetries"`
		Escalations         int            `json:"escalations"`
		EscalationsClosed   int            `json:"escalationsClosed"`
		DeadLetters         int            `json:"deadLetters"`
	} `json:"counts"`
}

// Harness is one test's isolated pipeline environment.
type Harness struct {
	T         testing.TB
	Topics    ingest.Topics
	Group     string
	DBURL     string
	Pool      *pgxpool.Pool
	Providers *providers.Map
	Expected  Expected
	Producer  *kgo.Client
}

// New creates topics (partitions each) and a database for t.
func New(t testing.TB, partitions int32) *Harness {
	t.Helper()
	sfx := kafkatest.Suffix()
	tp := ingest.Topics{
		Attempts: "booking.attempts.v1." + sfx, AttemptsDLQ: "booking.attempts.dlq.v1." + sfx,
		Decisions: "booking.manual-decisions.v1." + sfx, DecisionsDLQ: "booking.manual-decisions.dlq.v1." + sfx,
		Resolutions: "booking.resolutions.v1." + sfx, Escalations: "booking.escalations.v1." + sfx,
	}
	kafkatest.CreateTopics(t, partitions, tp.Attempts, tp.AttemptsDLQ, tp.Decisions, tp.DecisionsDLQ, tp.Resolutions, tp.Escalations)
	h := &Harness{T: t, Topics: tp, Group: "bookrecon-ingester-" + sfx}
	h.DBURL = pgtest.NewURL(t)
	pool, err := postgres.Open(context.Background(), h.DBURL, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h.Pool = pool
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if h.Providers, err = providers.LoadMap(mp); err != nil {
		t.Fatal(err)
	}
	ep, _ := samples.Path("expected.json")
	b, err := os.ReadFile(ep)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &h.Expected); err != nil {
		t.Fatal(err)
	}
	h.Producer, err = kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Producer.Close)
	return h
}

// IngestConfig is an ingester configuration for this harness.
func (h *Harness) IngestConfig() ingest.Config {
	return ingest.Config{Brokers: kafkatest.Brokers(), DatabaseURL: h.DBURL, Providers: h.Providers,
		Group: h.Group, Topics: h.Topics, AdminAddr: "127.0.0.1:0"}
}

// SampleLines reads a sample JSONL file.
func (h *Harness) SampleLines(name string) [][]byte {
	p, err := samples.Path(name)
	if err != nil {
		h.T.Fatal(err)
	}
	lines, err := publish.ReadLines(p)
	if err != nil {
		h.T.Fatal(err)
	}
	return lines
}

// Scalar runs a one-value query.
func (h *Harness) Scalar(q string, args ...any) int {
	h.T.Helper()
	var n int
	if err := h.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		h.T.Fatalf("%s: %v", q, err)
	}
	return n
}

// WaitFor polls cond every 100ms until it holds or timeout passes (then fails the test).
func (h *Harness) WaitFor(what string, timeout time.Duration, cond func() bool) {
	h.T.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.T.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// OutboxDrained reports whether every outbox row is published.
func (h *Harness) OutboxDrained() bool {
	return h.Scalar(`SELECT count(*) FROM outbox WHERE published_at IS NULL`) == 0
}
