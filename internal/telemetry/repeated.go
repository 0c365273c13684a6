package telemetry

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultRepeatEvery is how often a Repeated condition logs at most while it lasts.
const DefaultRepeatEvery = 30 * time.Second

// Repeated logs one recurring condition — a pause retried every second during an outage —
// without flooding the log: a line when it starts, then at most one line every Every while it
// lasts, and a line when it ends (End). Every line carries repeats, the occurrences since the
// previous line (1 on the first; on a later line, this one included), so the repeats of all
// lines add up to the occurrences.
// Safe for concurrent use; the zero value needs Logger and Msg.
type Repeated struct {
	Logger *slog.Logger
	Level  slog.Level
	Msg    string
	// Every is the least time between two lines of a lasting condition (default
	// DefaultRepeatEvery).
	Every time.Duration
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time

	mu      sync.Mutex
	active  bool
	last    time.Time // time of the previous line
	pending int       // occurrences not yet logged
}

// Log records one occurrence of the condition with this occurrence's attributes: it is logged
// at once when the condition starts, and otherwise only once Every has passed since the
// previous line.
func (r *Repeated) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.pending++
	if r.active && now.Sub(r.last) < cmp.Or(r.Every, DefaultRepeatEvery) {
		return
	}
	r.Logger.Log(context.Background(), r.Level, r.Msg, append(args, "repeats", r.pending)...)
	r.active, r.pending, r.last = true, 0, now
}

// End ends the condition: when it was active, msg is logged at info with repeats = the
// occurrences not logged yet (0 when the last one was), and the next Log starts it again. It
// does nothing when the condition was not active, so callers call it on every success.
func (r *Repeated) End(msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return
	}
	r.Logger.Log(context.Background(), slog.LevelInfo, msg, append(args, "repeats", r.pending)...)
	r.active, r.pending, r.last = false, 0, r.now()
}

func (r *Repeated) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
