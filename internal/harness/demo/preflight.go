package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// Preflight checks every precondition of a demo run before the caller drops or recreates
// anything: each address the demo serves on is free, the broker answers and the database server
// at adminURL answers. It reports every problem at once, each with what to do.
func Preflight(ctx context.Context, o Options, adminURL string) error {
	o.defaults()
	var errs []error
	for _, a := range []struct{ what, addr string }{
		{"provider simulator", o.SimAddr}, {"ingester admin", o.IngesterAddr}, {"reconciler admin", o.ReconcilerAddr},
		{"escalator admin", o.EscalatorAddr}, {"query API", o.QueryAddr}, {"query API admin", o.QueryAdminAddr},
	} {
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("the %s address %s is in use (is another demo or a service running? stop it first)", a.what, a.addr))
			continue
		}
		_ = ln.Close()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kafka.Options(o.Brokers, nil, nil, "cli")...)
	if err == nil {
		_, err = kadm.NewClient(cl).ListBrokers(cctx)
		cl.Close()
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("the Kafka broker %v does not answer (scripts/stack.sh up starts it): %w", o.Brokers, err))
	}
	pool, err := postgres.Open(cctx, adminURL, 1)
	if err != nil {
		errs = append(errs, fmt.Errorf("PostgreSQL does not answer (scripts/stack.sh up starts it): %w", err))
	} else {
		pool.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("demo: nothing was dropped or recreated:\n%w", errors.Join(errs...))
	}
	return nil
}
