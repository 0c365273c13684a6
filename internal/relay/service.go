package relay

import (
	"context"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/service"
)

// ForService returns the service.Config.Publish of a service that publishes its outbox rows
// through brokers: a Kafka client of its own (kafka.Options, named after the service), a Relay
// holding the lease as "<service>-<uuid>" with the metric series of topics (the service's output
// topics) pre-created on the service's registry, and a kafka.BrokerWatch. Its Ready fails while
// a topic is paused (Relay.Ready) or no broker answered within kafka.AnsweredWithin, whether or
// not this relay holds the lease. The ingester, which shares its consumer's client, builds its
// Relay itself (docs/decisions.md, "Where relays run").
func ForService(brokers, topics []string) service.Publish {
	return func(name string, pool *pgxpool.Pool, log *slog.Logger, reg *prometheus.Registry) (service.Publisher, error) {
		cl, err := kgo.NewClient(kafka.Options(brokers, log, reg, name)...)
		if err != nil {
			return nil, err
		}
		return &publisher{
			client: cl,
			relay: &Relay{Pool: pool, Client: cl, Logger: log, Metrics: NewMetrics(reg, topics),
				Config: Config{Holder: name + "-" + uuid.NewString()}},
			brokers: kafka.NewBrokerWatch(cl),
		}, nil
	}
}

// publisher is ForService's service.Publisher.
type publisher struct {
	client  *kgo.Client
	relay   *Relay
	brokers *kafka.BrokerWatch
}

// Run runs the relay and the broker watch until ctx ends, then closes the client.
func (p *publisher) Run(ctx context.Context) {
	defer p.client.Close()
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.relay.Run(ctx) })
	wg.Go(func() { p.brokers.Run(ctx) })
	wg.Wait()
}

func (p *publisher) Ready() error {
	if err := p.relay.Ready(); err != nil {
		return err
	}
	return p.brokers.Ready()
}
