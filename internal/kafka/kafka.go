// Package kafka is the one place franz-go client options are built (STYLE.md habit 4): seed
// brokers, the idempotent producer with acks=all, a bounded record delivery timeout, kslog
// logging in the service's slog stream and kprom client metrics. Consumer-group names are
// constants here: renaming a group re-consumes everything. BrokerWatch tells /readyz whether a
// broker answered lately.
package kafka

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/bookrecon/bookrecon/internal/topics"
)

// Consumer groups.
const (
	GroupIngester = "bookrecon-ingester"
)

// Options returns the common client options. reg may be nil (no client metrics); service names
// the kprom namespace subsystem.
func Options(brokers []string, logger *slog.Logger, reg prometheus.Registerer, service string) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30 * time.Second),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.ClientID("bookrecon-" + service),
		// Every relay publishes dead letters of records up to the input topics' limit plus headers.
		kgo.ProducerBatchMaxBytesFn(topics.ProducerBatchMaxBytes),
	}
	if logger != nil {
		opts = append(opts, kgo.WithLogger(kslog.New(logger.With("component", "franz-go"))))
	}
	if reg != nil {
		m := kprom.NewMetrics("bookrecon_kafka", kprom.Registerer(reg), kprom.Subsystem(service))
		opts = append(opts, kgo.WithHooks(m))
	}
	return opts
}
