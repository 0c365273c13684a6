// Package publish sends JSONL records to a topic the way samples/README.md's replay does: every
// occurredAt shifted by one offset so the first record is "now", each record published at its
// shifted time (or at once if an earlier record had a later time), keyed by bookingIntentId.
package publish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadLines reads a JSONL file; blank lines are skipped, every other line is kept verbatim.
func ReadLines(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only: Close has nothing to report
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	return out, sc.Err()
}

var occurredAt = regexp.MustCompile(`"occurredAt"\s*:\s*"([^"]*)"`)

// OccurredAt returns the first occurredAt of a line, if it has a parsable one.
func OccurredAt(line []byte) (time.Time, bool) {
	m := occurredAt.FindSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(m[1]))
	return t, err == nil
}

// Shift rewrites the first occurredAt of line by d (millisecond precision, UTC); lines without
// a parsable one are returned unchanged.
func Shift(line []byte, d time.Duration) []byte {
	t, ok := OccurredAt(line)
	if !ok {
		return line
	}
	m := occurredAt.FindSubmatchIndex(line)
	out := append([]byte{}, line[:m[2]]...)
	out = append(out, t.Add(d).UTC().Format("2006-01-02T15:04:05.000Z07:00")...)
	return append(out, line[m[3]:]...)
}

// Key returns the record key: the line's bookingIntentId, or nil when it has none.
func Key(line []byte) []byte {
	var v struct {
		BookingIntentID string `json:"bookingIntentId"`
	}
	if json.Unmarshal(line, &v) != nil || v.BookingIntentID == "" {
		return nil
	}
	return []byte(v.BookingIntentID)
}

// Epoch returns the occurredAt of the first line that has one.
func Epoch(lines [][]byte) (time.Time, bool) {
	for _, l := range lines {
		if t, ok := OccurredAt(l); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// Options control a replay.
type Options struct {
	Topic string
	// Shift is added to every occurredAt (usually now − Epoch).
	Shift time.Duration
	// Paced publishes each record at its shifted time; otherwise all at once, in order.
	Paced bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Sent, when set, is called after each record is acknowledged.
	Sent func(i int)
}

// Run publishes lines in order and waits for every acknowledgement. It stops at the first record
// the broker refuses or does not acknowledge in the client's delivery timeout; the error names
// the line and how many before it were published.
func Run(ctx context.Context, cl *kgo.Client, lines [][]byte, o Options) error {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	for i, l := range lines {
		v := Shift(l, o.Shift)
		if o.Paced {
			if t, ok := OccurredAt(v); ok {
				if wait := t.Sub(now()); wait > 0 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(wait):
					}
				}
			}
		}
		rec := &kgo.Record{Topic: o.Topic, Key: Key(l), Value: v}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			if i == 0 {
				return fmt.Errorf("publish: line 1 (nothing published): %w", err)
			}
			return fmt.Errorf("publish: line %d (lines 1–%d already published): %w", i+1, i, err)
		}
		if o.Sent != nil {
			o.Sent(i)
		}
	}
	return nil
}
