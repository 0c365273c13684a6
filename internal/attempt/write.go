package attempt

import (
	"context"
	"errors"

	"github.com/bookrecon/bookrecon/events"
)

// runOne writes Step s of cur, the attempt of the one-step batch b, through b's buffers and
// Flush: the one write path (Bulk), in Step's order. It returns false when the write found
// nothing to write to — a create that lost its race, a fenced WriteCheck whose lease was lost —
// and then wrote and counted nothing.
func (t *Tx) runOne(ctx context.Context, b *Bulk, cur *Row, s Step) (bool, error) {
	saved := t.Effects.clone()
	err := b.write(cur, s)
	if err == nil {
		err = b.Flush(ctx)
	}
	if errors.Is(err, errNotWritten) {
		t.Effects = saved
		return false, nil
	}
	return err == nil, err
}

// retryableOf is the stored retryable: set for a FAILED attempt only.
func retryableOf(a *Row) *bool {
	if a.Status != StatusFailed {
		return nil
	}
	return &a.Retryable
}

// requestJSON is the stored request: json.Marshal's bytes (events.Request.AppendJSON); nil for
// none.
func requestJSON(r *events.Request) []byte {
	if r == nil {
		return nil
	}
	return r.AppendJSON(make([]byte, 0, 256))
}
