package kafkatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
)

// TestRealBrokerRoundTrip proves the real broker started by scripts/stack.sh accepts an
// acks=all idempotent produce and serves the record back to a consumer group.
func TestRealBrokerRoundTrip(t *testing.T) {
	t.Parallel()
	topic := "test.roundtrip." + kafkatest.Suffix()
	kafkatest.CreateTopics(t, 3, topic)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("bi_1"), Value: []byte(`{"n":1}`)}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup("test-"+kafkatest.Suffix()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fetches := cons.PollFetches(ctx)
	if errs := fetches.Errors(); len(errs) > 0 {
		t.Fatalf("poll: %v", errs)
	}
	recs := fetches.Records()
	if len(recs) != 1 || string(recs[0].Key) != "bi_1" || string(recs[0].Value) != `{"n":1}` {
		t.Fatalf("got %d records, first %+v", len(recs), recs)
	}
}
