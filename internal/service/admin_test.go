package service_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
)

// TestAdminAddressTakenFailsAtStartup: a service whose admin address is in use stops at once
// with ErrAdminAddr naming the address — before it waits for PostgreSQL (here unreachable) —
// instead of running on without /metrics and health endpoints.
func TestAdminAddressTakenFailsAtStartup(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	nowhere := "postgres://u:p@127.0.0.1:1/none?connect_timeout=1"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, run := range map[string]func() error{
		"service.Run": func() error {
			return service.RunLoop(ctx, service.LoopSpec("escalator", service.Infra{DatabaseURL: nowhere, AdminAddr: addr}, "", relay.ForService([]string{"127.0.0.1:1"}, nil)),
				service.Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()}, func(context.Context, *service.Runtime) error { return nil })
		},
		"ingest.Run": func() error {
			return ingest.Run(ctx, ingest.Config{Infra: service.Infra{Brokers: []string{"127.0.0.1:1"}, DatabaseURL: nowhere, AdminAddr: addr}, Providers: &providers.Map{}},
				ingest.Deps{Logger: slog.New(slog.DiscardHandler)})
		},
	} {
		err := run()
		if !errors.Is(err, telemetry.ErrAdminAddr) || ctx.Err() != nil {
			t.Errorf("%s = %v (context %v), want ErrAdminAddr at once", name, err, ctx.Err())
		}
	}
}
