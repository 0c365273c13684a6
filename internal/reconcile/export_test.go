package reconcile

import (
	"context"

	"github.com/bookrecon/bookrecon/internal/attempt"
)

// SetBeforeWrite sets r's beforeWrite test signal: f runs after the provider answered and
// before the fenced write.
func SetBeforeWrite(r *Reconciler, f func(ctx context.Context, a *attempt.Row)) {
	r.testSignals.beforeWrite = f
}
