// Package topics creates the pipeline's Kafka topics with franz-go's kadm: partition count,
// replication factor and retention are part of the contract (a partition count change remaps
// keys and breaks per-intent order), so they live here, in code.
package topics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Partitions is the partition count of every pipeline topic.
const Partitions = 6

// Retention is the input topics' retention (7 days); processed_event keeps 14 days by default,
// more than this plus the one-day margin that the ingester checks at start-up.
const Retention = 7 * 24 * time.Hour

// Ensure creates every named topic that does not exist yet (idempotent) with Partitions
// partitions, replication factor rf and Retention.
func Ensure(ctx context.Context, adm *kadm.Client, rf int16, names ...string) error {
	ms := fmt.Sprint(Retention.Milliseconds())
	resp, err := adm.CreateTopics(ctx, Partitions, rf, map[string]*string{"retention.ms": &ms}, names...)
	if err != nil {
		return fmt.Errorf("topics: create: %w", err)
	}
	var errs []error
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("topics: create %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// Recreate deletes the named topics and creates them again, retrying while the broker still
// finishes the deletion. The demo uses it to start from empty topics.
func Recreate(ctx context.Context, adm *kadm.Client, rf int16, names ...string) error {
	if _, err := adm.DeleteTopics(ctx, names...); err != nil {
		return fmt.Errorf("topics: delete: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms := fmt.Sprint(Retention.Milliseconds())
		resp, err := adm.CreateTopics(ctx, Partitions, rf, map[string]*string{"retention.ms": &ms}, names...)
		if err == nil {
			pending := false
			for _, r := range resp.Sorted() {
				if r.Err != nil {
					pending = true
				}
			}
			if !pending {
				return nil
			}
			// Retry only the topics not created yet (TopicAlreadyExists: deletion still pending).
			var missing []string
			for _, r := range resp.Sorted() {
				if r.Err != nil {
					missing = append(missing, r.Topic)
				}
			}
			names = missing
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics: recreate %v: still pending after 60s (%v)", names, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
