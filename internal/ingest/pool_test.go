package ingest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/providers"
)

// TestPoolTooSmallRefused: the ingester holds up to 4 + Lanes connections at once (a batch
// transaction per lane, relay, partition maintenance, lag collector, readiness), and one more
// with more than one lane (the next batch's read of its stored links: 7 with the default two
// lanes); a smaller pool — and a transaction
// pooler with no direct URL to migrate over — is refused at once, before anything connects.
func TestPoolTooSmallRefused(t *testing.T) {
	for lanes, want := range map[int]int32{1: 5, 2: 7, 4: 9} {
		if n := ingest.Needs(lanes).Min(); n != want {
			t.Errorf("Needs(%d).Min() = %d, want %d", lanes, n, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := ingest.Run(ctx, ingest.Config{Infra: service.Infra{Brokers: []string{"127.0.0.1:1"}, DatabaseURL: "postgres://u:p@127.0.0.1:1/d",
		MaxDBConns: 4, Pooler: postgres.PoolerTransaction}, Providers: &providers.Map{}}, ingest.Deps{Logger: discardLogger()})
	if !errors.Is(err, postgres.ErrConfig) {
		t.Fatalf("Run = %v, want postgres.ErrConfig", err)
	}
	for _, w := range []string{"ingester: a database pool of size 4 (its _DB_CONNS) is too small: it holds up to 7 connections at once", "need a direct session"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Run took %s: it waited on a configuration error", el)
	}
}
