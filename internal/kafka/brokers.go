package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PingEvery is the pause between two pings of a BrokerWatch (each bounded by it too), and
// AnsweredWithin how recent a broker's answer must be for the watch to be ready.
const (
	PingEvery      = 3 * time.Second
	AnsweredWithin = 10 * time.Second
)

// ErrNoBroker is the readiness error of a BrokerWatch whose brokers have not answered within
// AnsweredWithin.
var ErrNoBroker = errors.New("kafka: no broker answered")

// BrokerWatch pings the brokers through a client in the background (kgo.Client.Ping) and
// remembers when one last answered, so /readyz can say whether the service can publish — a
// service whose outbox relay does not hold the lease publishes nothing, yet once it takes the
// lease over its escalations would not leave during a Kafka outage.
type BrokerWatch struct {
	cl      *kgo.Client
	mu      sync.Mutex
	started time.Time
	last    time.Time // the last answer; zero: none yet
	err     error     // the last ping's error
}

// NewBrokerWatch returns a watch of cl's brokers; Run pings them.
func NewBrokerWatch(cl *kgo.Client) *BrokerWatch {
	return &BrokerWatch{cl: cl, started: time.Now()}
}

// Run pings at once and then PingEvery after each ping's end, until ctx ends.
func (w *BrokerWatch) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, PingEvery)
		err := w.cl.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		if err == nil {
			w.last = time.Now()
		}
		w.err = err
		w.mu.Unlock()
		t.Reset(PingEvery)
	}
}

// Ready returns nil when a broker answered within AnsweredWithin, otherwise ErrNoBroker with
// how long it has been and the last ping's error.
func (w *BrokerWatch) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() && time.Since(w.last) <= AnsweredWithin {
		return nil
	}
	since := "since start-up " + time.Since(w.started).Round(time.Second).String() + " ago"
	if !w.last.IsZero() {
		since = "for " + time.Since(w.last).Round(time.Second).String()
	}
	if w.err == nil {
		return fmt.Errorf("%w %s: the service cannot publish", ErrNoBroker, since)
	}
	return fmt.Errorf("%w %s: the service cannot publish: %w", ErrNoBroker, since, w.err)
}
