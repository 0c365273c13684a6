package attempt

import (
	"context"

	"github.com/bookrecon/bookrecon/events"
)

// ApplyPendingDecisions applies the manual decisions kept for a, in the transaction that made
// it UNKNOWN or terminal, after that transaction's own effects (DESIGN.md "Contract v1").
func (t *Tx) ApplyPendingDecisions(ctx context.Context, a *Row) error {
	return nil
}

// ApplyDecision applies one deduplicated manual decision and returns what happened: applied,
// kept (the attempt does not exist yet or is IN_PROGRESS) or unchanged.
func (t *Tx) ApplyDecision(ctx context.Context, d events.Decision) (string, error) {
	return "kept", nil
}
