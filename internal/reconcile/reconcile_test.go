package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// clock is a controllable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func mapPath(t *testing.T) *providers.Map {
	m, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReconcileSettlesByClientReference(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := mapPath(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	clk := &clock{t: now}
	truth := simulator.Truth{"sim-hotels": {{ProviderReference: "HTL-1", ClientReference: "cr_1", Status: providers.StatusConfirmed, CreatedAt: now.Add(-time.Minute)}}}
	sim := simulator.New(simulator.Config{Truth: truth, Map: m, Now: clk.Now})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	cfg := reconcile.Config{Providers: m, NoJitter: true, MaxInterval: 10 * time.Second}
	rec, err := reconcile.New(cfg, pool, providers.NewHTTP(srv.URL, nil), slog.New(slog.NewTextHandler(os.Stderr, nil)), nil, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	scfg := &attempt.Config{Policies: attempt.PoliciesFrom(m)}
	for _, j := range []string{
		fmt.Sprintf(`{"specVersion":1,"eventId":"e1","eventType":"attempt.started","occurredAt":%q,"tenantId":"t","bookingIntentId":"bi_1","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_1:v1","provider":"sim-hotels","request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1.00","currency":"EUR"}},"recovery":{"clientReference":"cr_1"}}`, now.Format(time.RFC3339Nano)),
		fmt.Sprintf(`{"specVersion":1,"eventId":"e2","eventType":"attempt.outcome_unknown","occurredAt":%q,"tenantId":"t","bookingIntentId":"bi_1","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_1:v1","provider":"sim-hotels","outcome":{"timeoutClass":"read_timeout"}}`, now.Format(time.RFC3339Nano)),
	} {
		ev, err := events.DecodeAttempt([]byte(j), events.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			_, err := attempt.NewTx(tx, scfg).ApplyEvent(ctx, ev, events.DefaultTransportTimeoutCodes())
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(2 * time.Second)
	n, err := rec.RunOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1 checked", n, err)
	}
	var status, source, ref string
	if err := pool.QueryRow(ctx, `SELECT status, resolution_source, provider_reference FROM booking_attempt`).Scan(&status, &source, &ref); err != nil {
		t.Fatal(err)
	}
	if status != "CONFIRMED" || source != "client_reference" || ref != "HTL-1" {
		t.Fatalf("attempt = %s/%s/%s", status, source, ref)
	}
}
