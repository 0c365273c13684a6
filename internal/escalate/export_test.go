package escalate

import (
	"context"

	"github.com/google/uuid"
)

// SetBeforeCommit sets e's beforeCommit test signal: f runs inside each escalation's
// transaction before it commits.
func SetBeforeCommit(e *Escalator, f func(ctx context.Context, attemptID uuid.UUID)) {
	e.testSignals.beforeCommit = f
}
