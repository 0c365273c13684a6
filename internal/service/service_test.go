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

	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
)

// TestOpenPoolMalformedURL: a URL that cannot parse is a configuration error, returned at once,
// not an outage to wait out.
func TestOpenPoolMalformedURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := service.OpenPool(ctx, slog.New(slog.DiscardHandler), "postgres://%zz", 2, true)
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
			_, err := service.OpenPool(ctx, slog.New(slog.DiscardHandler), v.String(), 2, true)
			if !errors.Is(err, postgres.ErrConfig) || !strings.Contains(err.Error(), tt.want) || ctx.Err() != nil {
				t.Fatalf("OpenPool = %v, want postgres.ErrConfig saying %q, at once", err, tt.want)
			}
			if strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
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
