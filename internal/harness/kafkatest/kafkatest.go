// Package kafkatest connects tests to the real Kafka broker that scripts/stack.sh starts
// (BOOKRECON_KAFKA_BROKERS, default 127.0.0.1:19092) and gives each test its own topics, named
// at random, so tests run in parallel without seeing each other's records. Under -short
// (`make test-short`, which runs without the stack) every helper that takes a testing.TB skips
// its test instead.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Brokers returns the seed brokers of the real broker.
func Brokers() []string {
	if b := os.Getenv("BOOKRECON_KAFKA_BROKERS"); b != "" {
		return strings.Split(b, ",")
	}
	return []string{"127.0.0.1:19092"}
}

// SkipShort skips t under -short: it needs the Kafka broker, and `make test-short` runs without
// the stack. Every helper of this package that takes a testing.TB calls it; a test that
// connects to Brokers itself calls it first.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("kafkatest: needs the Kafka broker (BOOKRECON_KAFKA_BROKERS); skipped under -short")
	}
}

// Suffix returns a random 8-hex-digit suffix for topic and group names.
func Suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Admin returns a kadm client on the real broker, closed at cleanup.
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	SkipShort(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers()...))
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// CreateTopics creates each named topic with the given partition count on the real broker and
// deletes it at cleanup. It fails the test when the broker is unreachable.
func CreateTopics(t testing.TB, partitions int32, names ...string) {
	t.Helper()
	adm := Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, names...)
	if err != nil {
		t.Fatalf("kafkatest: create topics %v: %v (is the broker up? scripts/stack.sh up)", names, err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("kafkatest: create topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
	})
}

// ReadAll consumes topic from the start until at least min records arrived and then no new
// record for quiet, or until timeout; it returns every record read.
func ReadAll(t testing.TB, topic string, min int, quiet, timeout time.Duration) []*kgo.Record {
	t.Helper()
	SkipShort(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	defer cl.Close()
	deadline := time.Now().Add(timeout)
	var out []*kgo.Record
	for time.Now().Before(deadline) {
		wait := quiet
		if len(out) < min {
			wait = time.Until(deadline)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 && len(out) >= min {
			return out
		}
	}
	return out
}

// Header returns the value of header key on r, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
