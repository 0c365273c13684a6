package telemetry_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/telemetry"
)

type logLine struct {
	Level   string
	Msg     string
	Repeats int
	Try     int
}

func lines(t *testing.T, b *bytes.Buffer) []logLine {
	t.Helper()
	var out []logLine
	dec := json.NewDecoder(b)
	for dec.More() {
		var l logLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestRepeated: a condition repeated every second logs when it starts, then once every 30 s
// with the occurrences since the previous line, and once when it ends; the repeats add up.
func TestRepeated(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &telemetry.Repeated{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Level: slog.LevelWarn,
		Msg: "outbox relay paused", Now: func() time.Time { return now }}
	r.End("outbox relay resumed") // not active: nothing
	start := now
	for i := 0; i <= 95; i++ { // 96 occurrences, t = 0 … 95 s
		now = start.Add(time.Duration(i) * time.Second)
		r.Log("try", i)
	}
	now = now.Add(500 * time.Millisecond)
	r.End("outbox relay resumed")
	r.End("outbox relay resumed") // already ended: nothing
	now = now.Add(time.Second)
	r.Log("try", 96) // starts again: at once
	want := []logLine{
		{"WARN", "outbox relay paused", 1, 0},
		{"WARN", "outbox relay paused", 30, 30},
		{"WARN", "outbox relay paused", 30, 60},
		{"WARN", "outbox relay paused", 30, 90},
		{"INFO", "outbox relay resumed", 5, 0},
		{"WARN", "outbox relay paused", 1, 96},
	}
	got := lines(t, &buf)
	if len(got) != len(want) {
		t.Fatalf("got %d lines %+v, want %+v", len(got), got, want)
	}
	sum := 0
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
		sum += got[i].Repeats
	}
	if sum != 97 {
		t.Errorf("repeats add up to %d, want the 97 occurrences", sum)
	}
}

// TestRepeatedEvery: Every shortens the interval; an occurrence exactly Every after the
// previous line is logged; End right after a line reports 0 repeats.
func TestRepeatedEvery(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	r := &telemetry.Repeated{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Msg: "batch paused; retrying",
		Every: 5 * time.Second, Now: func() time.Time { return now }}
	for _, at := range []time.Duration{0, 2 * time.Second, 4 * time.Second, 5 * time.Second, 9 * time.Second, 10 * time.Second} {
		now = time.Unix(0, 0).Add(at)
		r.Log("try", int(at/time.Second))
	}
	r.End("batch resumed")
	want := []logLine{
		{"INFO", "batch paused; retrying", 1, 0},
		{"INFO", "batch paused; retrying", 3, 5},
		{"INFO", "batch paused; retrying", 2, 10},
		{"INFO", "batch resumed", 0, 0},
	}
	got := lines(t, &buf)
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
