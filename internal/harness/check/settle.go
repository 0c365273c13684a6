package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/providers"
)

// Progress is how far the pipeline is from settled: what Run's invariants need before they mean
// anything. A run checked before it settled reports the work still in flight as violations.
type Progress struct {
	// ConsumerLag is the number of input records the ingester's group has not committed, summed
	// over every partition of the input topics (a partition without a commit counts from its
	// log start).
	ConsumerLag int64
	// OutboxPending is the number of outbox rows waiting to be published: neither published,
	// set aside nor discarded (outbox.Backlog minus outbox.CountSetAside).
	OutboxPending int64
	// OutboxSetAside is the number of rows the relay set aside. They wait for a person
	// (bookrecon outbox list|retry|discard), not for time, so they are shown, not waited for.
	OutboxSetAside int64
	// Unsettled is the number of UNKNOWN attempts neither terminal nor escalated (no open
	// escalation): the reconciler or the escalator still owes them a verdict.
	Unsettled int64
}

// Settled reports no consumer lag, no pending outbox row and no unsettled UNKNOWN attempt.
func (p Progress) Settled() bool {
	return p.ConsumerLag == 0 && p.OutboxPending == 0 && p.Unsettled == 0
}

func (p Progress) String() string {
	aside := ""
	if p.OutboxSetAside > 0 {
		aside = fmt.Sprintf(" (%d set aside, not waited for: bookrecon outbox list)", p.OutboxSetAside)
	}
	return fmt.Sprintf("consumer lag %d, outbox backlog %d%s, %d UNKNOWN neither terminal nor escalated",
		p.ConsumerLag, p.OutboxPending, aside, p.Unsettled)
}

// Source is where Measure looks: the database and the ingester's group on the input topics.
type Source struct {
	Pool  *pgxpool.Pool
	Admin *kadm.Client
	Group string   // the ingester's consumer group
	Input []string // the input topics (attempts, manual decisions)
}

// Measure takes one Progress in the order work flows — consumer lag, then the UNKNOWN
// attempts, then the outbox — so that what an earlier stage hands on is counted by a later one.
func Measure(ctx context.Context, s Source) (Progress, error) {
	var p Progress
	var err error
	if p.ConsumerLag, err = consumerLag(ctx, s.Admin, s.Group, s.Input); err != nil {
		return p, err
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM booking_attempt a WHERE status = 'UNKNOWN'
		AND NOT EXISTS (SELECT 1 FROM escalation e WHERE e.attempt_id = a.id AND e.state = 'open')`).Scan(&p.Unsettled); err != nil {
		return p, fmt.Errorf("check: unsettled UNKNOWN attempts: %w", err)
	}
	backlog, _, err := outbox.Backlog(ctx, s.Pool)
	if err != nil {
		return p, fmt.Errorf("check: %w", err)
	}
	if p.OutboxSetAside, err = outbox.CountSetAside(ctx, s.Pool); err != nil {
		return p, fmt.Errorf("check: %w", err)
	}
	p.OutboxPending = max(backlog-p.OutboxSetAside, 0)
	return p, nil
}

// consumerLag sums, over every partition of topics, the log end offset minus the group's
// committed offset (the log start offset when the group has not committed the partition, so
// an ingester that never ran counts everything). A topic that does not exist is an error.
func consumerLag(ctx context.Context, adm *kadm.Client, group string, topics []string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("check: end offsets of %v: %w", topics, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("check: start offsets of %v: %w", topics, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, fmt.Errorf("check: offsets of group %s: %w", group, err)
	}
	var lag int64
	for _, t := range topics {
		if _, ok := ends[t]; !ok {
			return 0, fmt.Errorf("check: topic %s: no partitions listed", t)
		}
	}
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= 0 {
			from = max(from, c.At)
		}
		lag += max(e.Offset-from, 0)
	})
	return lag, nil
}

// ErrNotSettled is wrapped by the error of WaitSettled when the bound passed first.
var ErrNotSettled = errors.New("not settled")

// NotSettledError says the pipeline did not settle within Wait; Last is the last measurement.
type NotSettledError struct {
	Wait time.Duration
	Last Progress
}

func (e *NotSettledError) Error() string {
	return fmt.Sprintf("check: not settled within %s: %s", e.Wait, e.Last)
}

// Is makes errors.Is(err, ErrNotSettled) hold.
func (e *NotSettledError) Is(target error) bool { return target == ErrNotSettled }

// WaitOptions bound and pace WaitSettled.
type WaitOptions struct {
	// Wait bounds the whole wait.
	Wait time.Duration
	// Poll is the time between measurements (default 1s).
	Poll time.Duration
	// Every is the time between progress reports (default 5s); the first measurement is always
	// reported.
	Every time.Duration
	// Report receives a measurement and the time waited so far (nil: none).
	Report func(p Progress, waited time.Duration)
}

// WaitSettled measures until two measurements in a row, Poll apart, are Settled (one could fall
// between a stage's commit and the next stage's pick-up), and returns the last one. When Wait
// passes first it returns a *NotSettledError (ErrNotSettled). A measurement that fails with a
// retriable Kafka error (COORDINATOR_NOT_AVAILABLE while a fresh broker creates
// __consumer_offsets, a leader election; see retriable) is measured again Poll later, and
// returned only when it still fails at the bound; any other failed measurement is returned as
// it is.
func WaitSettled(ctx context.Context, s Source, o WaitOptions) (Progress, error) {
	return waitSettled(ctx, func(ctx context.Context) (Progress, error) { return Measure(ctx, s) }, o)
}

func waitSettled(ctx context.Context, measure func(context.Context) (Progress, error), o WaitOptions) (Progress, error) {
	o.Poll, o.Every = cmp.Or(o.Poll, time.Second), cmp.Or(o.Every, 5*time.Second)
	start := time.Now()
	deadline := start.Add(o.Wait)
	var reported time.Time
	confirmed := false // the previous measurement was settled too
	for {
		p, err := measure(ctx)
		now := time.Now()
		lastPoll := !now.Add(o.Poll).Before(deadline)
		switch {
		case err != nil && (!retriable(err) || lastPoll):
			return p, err
		case err != nil:
			confirmed = false // measured again after Poll
		case p.Settled() && confirmed:
			return p, nil
		default:
			confirmed = p.Settled()
			last := !p.Settled() && lastPoll
			if o.Report != nil && (reported.IsZero() || now.Sub(reported) >= o.Every || last) {
				o.Report(p, now.Sub(start))
				reported = now
			}
			if last {
				return p, &NotSettledError{Wait: o.Wait, Last: p}
			}
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

// retriable reports a Kafka error that waiting can mend (kerr.IsRetriable), except
// UNKNOWN_TOPIC_OR_PARTITION: kerr counts it retriable, but for the input topics of a pipeline
// that already ran it means a wrong name or suffix, which no wait mends.
func retriable(err error) bool {
	return kerr.IsRetriable(err) && !errors.Is(err, kerr.UnknownTopicOrPartition)
}

// LongestDeadline returns the longest escalation deadline of m over every provider and
// operation (providers.DefaultDeadline when m is nil or empty): an UNKNOWN attempt is escalated
// at the latest that long after it turned UNKNOWN.
func LongestDeadline(m *providers.Map) time.Duration {
	if m == nil || len(m.Names()) == 0 {
		return providers.DefaultDeadline
	}
	var longest time.Duration
	for _, name := range m.Names() {
		c, _ := m.Get(name)
		for _, op := range events.Operations() {
			longest = max(longest, c.DeadlineFor(op))
		}
	}
	return longest
}
