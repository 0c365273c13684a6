package topics_test

import (
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestConfigsMinInsyncReplicas: min.insync.replicas=2 on every topic from replication factor 3
// on, the broker's default below it.
func TestConfigsMinInsyncReplicas(t *testing.T) {
	t.Parallel()
	n := topics.Default()
	for _, tt := range []struct {
		rf   int16
		want string // "" when not set
	}{{1, ""}, {2, ""}, {3, "2"}, {5, "2"}} {
		cfgs := topics.Configs(n, tt.rf)
		if len(cfgs) != len(n.All()) {
			t.Fatalf("rf %d: %d topic configs, want %d", tt.rf, len(cfgs), len(n.All()))
		}
		for topic, cfg := range cfgs {
			got := ""
			if v := cfg["min.insync.replicas"]; v != nil {
				got = *v
			}
			if got != tt.want {
				t.Errorf("rf %d: %s min.insync.replicas = %q, want %q", tt.rf, topic, got, tt.want)
			}
		}
	}
}

// TestProducerBatchMaxBytes: every client batches dead letters up to the dead-letter topics'
// limit, suffixed or not, and everything else within franz-go's default.
func TestProducerBatchMaxBytes(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]int32{
		"booking.attempts.dlq.v1": topics.DeadLetterMaxMessageBytes, "booking.attempts.dlq.v1.run7": topics.DeadLetterMaxMessageBytes,
		"booking.manual-decisions.dlq.v1": topics.DeadLetterMaxMessageBytes, "booking.manual-decisions.dlq.v1.x": topics.DeadLetterMaxMessageBytes,
		"booking.attempts.dlq.v10": 1_000_012, "booking.resolutions.v1": 1_000_012, "booking.attempts.v1": 1_000_012,
	} {
		if got := topics.ProducerBatchMaxBytes(topic); got != want {
			t.Errorf("ProducerBatchMaxBytes(%s) = %d, want %d", topic, got, want)
		}
	}
}

// TestEnsureRaisesDeadLetterLimit: a dead-letter topic made before its limit was part of the
// configuration (the broker's 1 MiB default) is raised to DeadLetterMaxMessageBytes by Ensure;
// the other topics keep theirs.
func TestEnsureRaisesDeadLetterLimit(t *testing.T) {
	t.Parallel()
	n := topics.FromSuffix("raise" + kafkatest.Suffix())
	kafkatest.CreateTopics(t, 1, n.AttemptsDLQ, n.Resolutions) // plain, the broker's defaults
	adm := kafkatest.Admin(t)
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), n.All()...) })
	if err := topics.Ensure(context.Background(), adm, 1, n); err != nil {
		t.Fatal(err)
	}
	// The broker applies a config change through its metadata log: read until it shows (10 s).
	got := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cfgs, err := adm.DescribeTopicConfigs(context.Background(), n.AttemptsDLQ, n.Resolutions)
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range cfgs {
			for _, c := range rc.Configs {
				if c.Key == "max.message.bytes" && c.Value != nil {
					got[rc.Name] = *c.Value
				}
			}
		}
		if got[n.AttemptsDLQ] == "8388608" || time.Now().After(deadline) {
			break
		}
	}
	if got[n.AttemptsDLQ] != "8388608" || got[n.Resolutions] != "1048588" {
		t.Errorf("max.message.bytes = %v, want %s 8388608 and %s 1048588", got, n.AttemptsDLQ, n.Resolutions)
	}
}
