package ingest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// ReasonProcessingFailed is the dead-letter reason of a valid record whose own data made its
// transaction fail (a PostgreSQL data or integrity error), with the SQLSTATE as detail.
const ReasonProcessingFailed = "processing_failed"

// deadLetter writes the record to its dead-letter topic through the outbox: original key and
// bytes (a null value stays null), the reason and origin in headers, keyed by source position
// (docs/design.md#dead-letters). It runs under a savepoint: should PostgreSQL refuse the dead
// letter itself (postgres.IsDataError), it is written again with a fixed detail
// (DetailDeadLetterRewritten and the SQLSTATE), the reason and the original bytes kept, so a record
// whose dead letter cannot be written as built never stalls its partition and is never mistaken for
// an outage. Any other failure is returned: the batch pauses and is retried.
func (in *Ingester) deadLetter(ctx context.Context, tx pgx.Tx, r *kgo.Record, reason, detail string, res *batchResult) error {
	insert := func(detail string) error {
		return postgres.Savepoint(ctx, tx, func(sp pgx.Tx) error { return outbox.Insert(ctx, sp, in.deadLetterMessage(r, reason, detail)) })
	}
	err := insert(detail)
	if postgres.IsDataError(err) {
		in.log.Error("dead letter refused by the database; written again with a fixed detail", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "reason", reason, "sqlstate", postgres.SQLState(err))
		err = insert(DetailDeadLetterRewritten + postgres.SQLState(err))
	}
	if err != nil {
		return fmt.Errorf("ingest: dead letter %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	res.dead[[2]string{in.metricTopic(r.Topic), reason}]++
	in.log.Info("dead letter", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "detail", detail)
	return nil
}

// DetailDeadLetterRewritten, followed by the SQLSTATE, is the bookrecon.dlq.detail of a dead
// letter that PostgreSQL refused as first built (see deadLetter).
const DetailDeadLetterRewritten = "dead letter rewritten: the database refused it as built, sqlstate "

// deadLetterMessage is the outbox message of r's dead letter.
func (in *Ingester) deadLetterMessage(r *kgo.Record, reason, detail string) outbox.Message {
	dlq := in.cfg.Topics.AttemptsDLQ
	if r.Topic == in.cfg.Topics.Decisions {
		dlq = in.cfg.Topics.DecisionsDLQ
	}
	pos := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
	return outbox.Message{
		Topic: dlq, Key: r.Key, Value: r.Value, EventID: pos,
		Headers: []outbox.Header{
			{Key: "bookrecon.dlq.reason", Value: reason},
			{Key: "bookrecon.dlq.detail", Value: detail},
			{Key: "bookrecon.source.topic", Value: r.Topic},
			{Key: "bookrecon.source.partition", Value: strconv.Itoa(int(r.Partition))},
			{Key: "bookrecon.source.offset", Value: strconv.FormatInt(r.Offset, 10)},
		},
	}
}
