package attempt

import (
	"context"
	"fmt"

	"github.com/bookrecon/bookrecon/events"
)

// Applied is what ApplyEvent did with one event.
type Applied struct {
	Verdict Verdict
	Attempt *Row
}

// ApplyEvent applies one deduplicated attempt event as a one-event batch (Bulk): it locks the
// intent, loads the attempt, its siblings, escalations and kept decisions, asks the transition
// function (OnEvent) and writes its Step: state change, audit row, anomaly and escalation rows,
// outbox rows (docs/design.md#attempt-states, docs/design.md#escalations,
// docs/design.md#storage-rules). A create that lost its race to another intent's transaction
// decides again. The caller owns the transaction and has inserted the processed_event row.
// transportCodes: see FactOf.
func (t *Tx) ApplyEvent(ctx context.Context, ev events.Attempt, transportCodes []string) (Applied, error) {
	var d events.Digests
	if ev.EventType == events.EventStarted {
		var err error
		if d, err = ev.Digests(); err != nil {
			return Applied{}, fmt.Errorf("attempt: request hash %s: %w", ev.EventID, err)
		}
	}
	for range 2 {
		b, err := t.NewBulk(ctx, []events.Attempt{ev}, nil, transportCodes)
		if err != nil {
			return Applied{}, err
		}
		b.single = true
		cur := b.byKey[[2]string{ev.TenantID, ev.IdempotencyKey}]
		s := OnEvent(cur, ev, FactOf(ev, transportCodes), d, b.env(ev.Provider))
		ok, err := t.runOne(ctx, b, cur, s)
		if err != nil {
			return Applied{}, err
		}
		if ok {
			return Applied{Verdict: s.Verdict, Attempt: s.Next}, nil
		}
		// created meanwhile under another intent's lock: decide again
	}
	return Applied{}, fmt.Errorf("attempt: %s/%s: create raced twice", ev.TenantID, ev.IdempotencyKey)
}
