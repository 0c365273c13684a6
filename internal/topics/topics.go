// Package topics creates the pipeline's Kafka topics with franz-go's kadm: partition count,
// replication factor and retention are part of the contract (a partition count change remaps
// keys and breaks per-intent order), so they live here, in code.
package topics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/bookrecon/bookrecon/events"
)

// Partitions is the partition count of every pipeline topic.
const Partitions = 6

// Retention is the input topics' retention (7 days); processed_event keeps 14 days by default,
// more than this plus the one-day margin that the ingester checks at start-up.
const Retention = 7 * 24 * time.Hour

// MaxMessageBytes is the max.message.bytes of the input and output topics: Kafka's default, 1 MiB
// plus the record batch overhead, written explicitly so a broker with another default does not
// change the contract.
const MaxMessageBytes = 1_048_588

// DeadLetterMaxMessageBytes is the max.message.bytes of the dead-letter topics, and the relay's
// producer batch limit for them (ProducerBatchMaxBytes): a dead letter carries the original bytes
// of any record the input topics accept (up to MaxMessageBytes, uncompressed, or up to this once
// decompressed) plus the bookrecon.dlq.* and bookrecon.source.* headers (a few hundred bytes:
// the detail is a fixed text). A record beyond it is set aside by the relay, never lost.
const DeadLetterMaxMessageBytes = 8 << 20

// producerBatchMaxBytes is franz-go's default record batch limit (before compression).
const producerBatchMaxBytes = 1_000_012

// MinInsyncReplicas is the min.insync.replicas of every topic with a replication factor of 3
// or more (what production runs): with acks=all a write is acknowledged once two replicas hold
// it, so one node may die or restart without losing an acknowledged record or stopping writes.
const MinInsyncReplicas = 2

// Configs returns each topic's configuration at replication factor rf: Retention and
// MaxMessageBytes, DeadLetterMaxMessageBytes for the dead-letter topics, and MinInsyncReplicas
// when rf ≥ 3 (below that the broker's default, 1, is the only value that accepts writes with
// a replica down).
func Configs(n Names, rf int16) map[string]map[string]*string {
	ms, max, dlq := fmt.Sprint(Retention.Milliseconds()), fmt.Sprint(MaxMessageBytes), fmt.Sprint(DeadLetterMaxMessageBytes)
	isr := fmt.Sprint(MinInsyncReplicas)
	out := map[string]map[string]*string{}
	for _, t := range n.All() {
		out[t] = map[string]*string{"retention.ms": &ms, "max.message.bytes": &max}
		if rf >= 3 {
			out[t]["min.insync.replicas"] = &isr
		}
	}
	out[n.AttemptsDLQ]["max.message.bytes"] = &dlq
	out[n.DecisionsDLQ]["max.message.bytes"] = &dlq
	return out
}

// ProducerBatchMaxBytes is the producer's record batch limit for topic (franz-go's
// ProducerBatchMaxBytesFn; kafka.Options sets it on every client, so whichever service's relay
// holds the lease publishes the same records): DeadLetterMaxMessageBytes for a dead-letter topic
// — a v1 dead-letter name, alone or followed by "." and a suffix (FromSuffix) — and franz-go's
// default 1,000,012 bytes, below MaxMessageBytes, for every other topic.
func ProducerBatchMaxBytes(topic string) int32 {
	for _, d := range []string{events.TopicAttemptsDLQ, events.TopicManualDecisionsDLQ} {
		if topic == d || strings.HasPrefix(topic, d+".") {
			return DeadLetterMaxMessageBytes
		}
	}
	return producerBatchMaxBytes
}

// Ensure creates every topic of n that does not exist yet (idempotent) with Partitions
// partitions, replication factor rf and Configs(n, rf). An existing topic is left as it is,
// except that a dead-letter topic's max.message.bytes below DeadLetterMaxMessageBytes is raised.
func Ensure(ctx context.Context, adm *kadm.Client, rf int16, n Names) error {
	var errs []error
	var existing []string // dead-letter topics made before
	for t, cfg := range Configs(n, rf) {
		resp, err := adm.CreateTopic(ctx, Partitions, rf, cfg, t)
		err = cmp.Or(err, resp.Err)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			if t == n.AttemptsDLQ || t == n.DecisionsDLQ {
				existing = append(existing, t)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("topics: create %s: %w", t, err))
		}
	}
	if len(existing) > 0 {
		if err := raiseDeadLetterLimit(ctx, adm, existing...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// raiseDeadLetterLimit raises max.message.bytes of existing dead-letter topics made before it
// was part of their configuration (or by hand) to DeadLetterMaxMessageBytes; a larger limit is
// left as it is.
func raiseDeadLetterLimit(ctx context.Context, adm *kadm.Client, names ...string) error {
	// A topic created a moment ago may not be known to the broker answering yet.
	var cfgs kadm.ResourceConfigs
	var err error
	for try := 0; ; try++ {
		cfgs, err = adm.DescribeTopicConfigs(ctx, names...)
		unknown := errors.Is(err, kerr.UnknownTopicOrPartition)
		for _, rc := range cfgs {
			unknown = unknown || errors.Is(rc.Err, kerr.UnknownTopicOrPartition)
		}
		if !unknown || try == 20 || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("topics: describe %v: %w", names, err)
	}
	want := fmt.Sprint(DeadLetterMaxMessageBytes)
	var errs []error
	for _, rc := range cfgs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("topics: describe %s: %w", rc.Name, rc.Err))
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			if v, err := strconv.ParseInt(*c.Value, 10, 64); err == nil && v >= DeadLetterMaxMessageBytes {
				continue
			}
			resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &want}}, rc.Name)
			if err == nil {
				var r kadm.AlterConfigsResponse
				if r, err = resp.On(rc.Name, nil); err == nil {
					err = r.Err
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("topics: raise max.message.bytes of %s: %w", rc.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Recreate deletes n's topics and creates them again with Configs, retrying while the broker
// still finishes the deletion. The demo uses it to start from empty topics.
func Recreate(ctx context.Context, adm *kadm.Client, rf int16, n Names) error {
	if _, err := adm.DeleteTopics(ctx, n.All()...); err != nil {
		return fmt.Errorf("topics: delete: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	pending := Configs(n, rf)
	for len(pending) > 0 {
		var last error
		for t, cfg := range pending {
			resp, err := adm.CreateTopic(ctx, Partitions, rf, cfg, t)
			if err == nil && resp.Err == nil {
				delete(pending, t)
				continue
			}
			last = cmp.Or(err, resp.Err) // TopicAlreadyExists: the deletion is still pending
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics: recreate %v: still pending after 60s (%w)", slices.Sorted(maps.Keys(pending)), last)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}
