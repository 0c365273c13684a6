package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
)

// TestOpenPoolMalformedURL: a URL that cannot parse is a configuration error, returned at once,
// not an outage to wait out.
func TestOpenPoolMalformedURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := service.OpenPool(ctx, slog.New(slog.DiscardHandler), service.PoolConfig{URL: "postgres://%zz", MaxConns: 2, Migrate: true})
	if !errors.Is(err, postgres.ErrConfig) {
		t.Fatalf("OpenPool = %v, want postgres.ErrConfig", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("OpenPool took %s: it retried a configuration error", el)
	}
}

// TestOpenPoolRefusals: answers of the server that waiting cannot change — a wrong password
// (28P01), a role that does not exist (28000), a database that does not exist (3D000) — fail
// at once as postgres.ErrConfig with what to do, instead of being waited out like an outage.
func TestOpenPoolRefusals(t *testing.T) {
	t.Parallel()
	pgtest.SkipShort(t)
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username()
	for _, tt := range []struct {
		name string
		edit func(u *url.URL)
		want string
	}{
		{"WrongPassword", func(u *url.URL) { u.User = url.UserPassword(user, "not-the-password") }, "password authentication failed"},
		{"NoSuchRole", func(u *url.URL) { u.User = url.UserPassword("no_such_role_x", "x") }, "check the user"},
		{"NoSuchDatabase", func(u *url.URL) { u.Path = "/no_such_database_x" }, "the database does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := *u
			tt.edit(&v)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := service.OpenPool(ctx, slog.New(slog.DiscardHandler), service.PoolConfig{Name: "test", URL: v.String(), MaxConns: 2, Migrate: true})
			if !errors.Is(err, postgres.ErrConfig) || !strings.Contains(err.Error(), tt.want) || ctx.Err() != nil {
				t.Fatalf("OpenPool = %v, want postgres.ErrConfig saying %q, at once", err, tt.want)
			}
			if strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestPoolRefusedAtOnce: a pool smaller than what the service holds at once (a pool of 1
// deadlocked the relay), an unknown pooler, and a transaction pooler with no direct URL to
// migrate over are configuration errors, reported together and before anything connects.
func TestPoolRefusedAtOnce(t *testing.T) {
	if n := service.RunNeeds().Min(); n != 3 {
		t.Errorf("RunNeeds().Min() = %d, want 3 (loop, relay, readiness)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Nothing listens on port 1: a configuration error must not wait for the database.
	const url = "postgres://u:p@127.0.0.1:1/d?sslmode=disable"
	for _, c := range []struct {
		name string
		cfg  service.PoolConfig
		want []string
	}{
		{"pool of 1", service.PoolConfig{Name: "reconciler", URL: url, MaxConns: 1, Needs: service.RunNeeds()},
			[]string{"reconciler: a database pool of size 1 (its _DB_CONNS) is too small: it holds up to 3 connections at once (its loop 1, outbox relay 1, readiness check 1)"}},
		{"unknown pooler", service.PoolConfig{Name: "x", URL: url, Pooler: "statement"}, []string{`database pooler "statement"`}},
		{"migrating through the pooler", service.PoolConfig{Name: "escalator", URL: url, Pooler: postgres.PoolerTransaction, Migrate: true},
			[]string{"escalator: behind a transaction pooler the migrations need a direct session"}},
		{"migrate URL is the pooler's", service.PoolConfig{Name: "x", URL: url, MigrateURL: url, Pooler: postgres.PoolerTransaction, Migrate: true, MaxConns: 2, Needs: service.RunNeeds()},
			[]string{"too small", "need a direct session"}},
	} {
		start := time.Now()
		_, err := service.OpenPool(ctx, slog.New(slog.DiscardHandler), c.cfg)
		if !errors.Is(err, postgres.ErrConfig) {
			t.Errorf("%s: OpenPool = %v, want postgres.ErrConfig", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("%s: OpenPool took %s: it waited on a configuration error", c.name, el)
		}
	}
	// Run refuses the same way, and a migrate URL of its own makes a transaction pooler fine.
	err := service.RunLoop(ctx, service.LoopSpec("escalator", service.Infra{DatabaseURL: url, MaxDBConns: 1}, "", nil), service.Deps{Logger: slog.New(slog.DiscardHandler)}, nil)
	if !errors.Is(err, postgres.ErrConfig) {
		t.Errorf("Run with a pool of 1 = %v, want postgres.ErrConfig", err)
	}
	ok := service.LoopSpec("escalator", service.Infra{DatabaseURL: url, MigrateDatabaseURL: "postgres://u:p@127.0.0.1:2/d", Pooler: postgres.PoolerTransaction}, "", nil)
	if err := ok.PoolConfig().Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
}

func TestInterrupted(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{ended, context.Canceled, true},
		{ended, fmt.Errorf("waiting for postgresql: %w", context.Canceled), true},
		{ended, errors.New("migrations failed"), false},
		{live, context.Canceled, false},
	} {
		if got := service.Interrupted(c.ctx, c.err); got != c.want {
			t.Errorf("Interrupted(ctx err %v, %v) = %v, want %v", c.ctx.Err(), c.err, got, c.want)
		}
	}
}
