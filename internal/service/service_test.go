package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

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
