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

// ApplyEvent applies one deduplicated attempt event: it locks the intent, reads the attempt,
// asks the transition function (OnEvent) and writes its Step: state change, audit row, anomaly
// and escalation rows, outbox rows (docs/design.md#attempt-states, docs/design.md#escalations,
// docs/design.md#storage-rules). The caller owns the transaction and has inserted the
// processed_event row. transportCodes: see FactOf.
func (t *Tx) ApplyEvent(ctx context.Context, ev events.Attempt, transportCodes []string) (Applied, error) {
	if err := t.LockIntent(ctx, ev.TenantID, ev.BookingIntentID); err != nil {
		return Applied{}, err
	}
	f := FactOf(ev, transportCodes)
	var d events.Digests
	if ev.EventType == events.EventStarted {
		var err error
		if d, err = ev.Digests(); err != nil {
			return Applied{}, fmt.Errorf("attempt: request hash %s: %w", ev.EventID, err)
		}
	}
	env, err := t.env(ctx, ev.Provider)
	if err != nil {
		return Applied{}, err
	}
	for range 2 {
		cur, err := t.ByKey(ctx, ev.TenantID, ev.IdempotencyKey)
		if err != nil {
			return Applied{}, err
		}
		s := OnEvent(cur, ev, f, d, env)
		ok, err := t.run(ctx, s)
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
