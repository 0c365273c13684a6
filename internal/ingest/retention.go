package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/bookrecon/bookrecon/processedevent"
)

// ErrRetention: an input topic keeps records longer than processed_event keeps their dedup
// rows (docs/retention.md); the ingester refuses to start.
var ErrRetention = errors.New("ingest: retention too short")

// partitions keeps processed_event's daily partitions for one ingester (docs/retention.md): the
// days known to exist, so that a batch creates only the partitions it lacks (ensure), and the
// stale_event bound, the oldest kept day (minOccurred: zero until the first runOnce). Its
// maintenance loop (run) is ticker → runOnce → log → continue.
type partitions struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	// retentionDays is Config.RetentionDays: runOnce keeps [today − retentionDays, today + 2].
	retentionDays int
	now           func() time.Time // time.Now; tests set the day

	mu     sync.Mutex
	known  map[time.Time]bool
	oldest time.Time
}

func newPartitions(pool *pgxpool.Pool, log *slog.Logger, retentionDays int) *partitions {
	return &partitions{pool: pool, log: log, retentionDays: retentionDays, now: time.Now, known: map[time.Time]bool{}}
}

// maintenanceEvery is the period of the partition maintenance loop.
const maintenanceEvery = time.Hour

// maintained is what one runOnce did.
type maintained struct {
	kept    int       // days ensured: retentionDays + 3
	dropped int       // whole partitions dropped, older than the first kept day
	oldest  time.Time // the oldest partition left: the new stale_event bound
}

// run maintains the partitions every maintenanceEvery until ctx ends; a failed round is logged
// and tried again at the next tick.
func (p *partitions) run(ctx context.Context) {
	t := time.NewTicker(maintenanceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := p.maintain(ctx); err != nil {
				p.log.Warn("partition maintenance", "err", err)
			}
		}
	}
}

// maintain is runOnce with its log line.
func (p *partitions) maintain(ctx context.Context) (maintained, error) {
	m, err := p.runOnce(ctx)
	if err == nil && m.dropped > 0 {
		p.log.Info("processed_event partitions dropped", "days", m.dropped)
	}
	return m, err
}

// runOnce keeps partitions for [today − retentionDays, today + 2], drops older ones whole, and
// moves the stale_event bound to the oldest kept day.
func (p *partitions) runOnce(ctx context.Context) (maintained, error) {
	today := processedevent.Day(p.now())
	var days []time.Time
	for d := -p.retentionDays; d <= 2; d++ {
		days = append(days, today.AddDate(0, 0, d))
	}
	if err := processedevent.EnsurePartitions(ctx, p.pool, days...); err != nil {
		return maintained{}, err
	}
	dropped, err := processedevent.DropBefore(ctx, p.pool, days[0])
	if err != nil {
		return maintained{}, err
	}
	oldest, err := processedevent.OldestDay(ctx, p.pool)
	if err != nil {
		return maintained{}, err
	}
	p.mu.Lock()
	p.oldest = oldest
	for _, d := range days {
		p.known[d] = true
	}
	p.mu.Unlock()
	return maintained{kept: len(days), dropped: len(dropped), oldest: oldest}, nil
}

// minOccurred is the stale_event bound: events that occurred before it are dead-lettered.
func (p *partitions) minOccurred() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.oldest
}

// ensure creates processed_event partitions for days not seen before.
func (p *partitions) ensure(ctx context.Context, days map[time.Time]bool) error {
	p.mu.Lock()
	var missing []time.Time
	for d := range days {
		if !p.known[d] {
			missing = append(missing, d)
		}
	}
	p.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	if err := processedevent.EnsurePartitions(ctx, p.pool, missing...); err != nil {
		return err
	}
	p.mu.Lock()
	for _, d := range missing {
		p.known[d] = true
	}
	p.mu.Unlock()
	return nil
}

// checkRetention refuses to start when an input topic keeps records longer than
// processed_event does (minus the margin): a redelivery could then outlive its dedup row.
func (in *Ingester) checkRetention(ctx context.Context) error {
	adm := kadm.NewClient(in.client)
	cfgs, err := adm.DescribeTopicConfigs(ctx, in.cfg.Topics.Attempts, in.cfg.Topics.Decisions)
	if err != nil {
		return fmt.Errorf("ingest: describe topic configs: %w", err)
	}
	ttl := time.Duration(in.cfg.RetentionDays) * 24 * time.Hour
	for _, rc := range cfgs {
		if rc.Err != nil {
			return fmt.Errorf("ingest: topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return fmt.Errorf("ingest: topic %s retention.ms: %w", rc.Name, err)
			}
			if ms < 0 || time.Duration(ms)*time.Millisecond+in.cfg.RetentionMargin > ttl {
				return fmt.Errorf("%w: topic %s keeps records %s (+%s margin) but processed_event keeps %s: raise RetentionDays or lower retention.ms", ErrRetention,
					rc.Name, time.Duration(ms)*time.Millisecond, in.cfg.RetentionMargin, ttl)
			}
		}
	}
	return nil
}
