package loadgen_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

func TestGenerateIsValidDeterministicAndRoundTrips(t *testing.T) {
	t.Parallel()
	cfg := loadgen.Config{Intents: 600, Seed: 9, Start: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Mix: loadgen.DefaultMix}
	a, b := loadgen.Generate(cfg), loadgen.Generate(cfg)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same config, different output:\n%s", diff)
	}
	ids := map[string]bool{}
	for i, r := range a.Records {
		ev, err := events.DecodeAttempt(r, events.DecodeOptions{})
		if err != nil {
			t.Fatalf("record %d invalid: %v", i, err)
		}
		if string(a.Keys[i]) != ev.BookingIntentID {
			t.Fatalf("record %d keyed %q, intent %q", i, a.Keys[i], ev.BookingIntentID)
		}
		ids[ev.EventID] = true
	}
	if len(ids) != a.UniqueEvents {
		t.Fatalf("unique event ids %d, UniqueEvents %d", len(ids), a.UniqueEvents)
	}
	if a.KeyConflicts == 0 || a.BlindRetries == 0 || len(a.Records) == a.UniqueEvents {
		t.Fatalf("the default mix must contain key conflicts (%d), blind retries (%d) and redeliveries", a.KeyConflicts, a.BlindRetries)
	}
	dir := t.TempDir()
	if err := a.Write(dir); err != nil {
		t.Fatal(err)
	}
	r, err := loadgen.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.UniqueEvents != a.UniqueEvents || len(r.Records) != len(a.Records) || !cmp.Equal(r.Expected, a.Expected) {
		t.Fatalf("round trip changed the run: %d/%d unique, %d/%d records", r.UniqueEvents, a.UniqueEvents, len(r.Records), len(a.Records))
	}
	truth, err := simulator.LoadTruth(filepath.Join(dir, loadgen.TruthFile))
	if err != nil {
		t.Fatalf("the simulator does not load the truth file: %v", err)
	}
	if got, want := len(truth["sim-hotels"]), len(a.Truth["sim-hotels"]); got != want || want == 0 {
		t.Fatalf("simulator truth has %d records, want %d (> 0)", got, want)
	}
}

func TestMixValidate(t *testing.T) {
	if err := loadgen.DefaultMix.Validate(); err != nil {
		t.Errorf("DefaultMix: %v", err)
	}
	for _, c := range []struct {
		mix  loadgen.Mix
		want string
	}{
		{loadgen.Mix{Failure: 5}, "failure share 5 is not in [0, 1]\nthe intent shares add up to 5, more than 1"},
		{loadgen.Mix{Redeliveries: -0.1}, "redeliveries share -0.1 is not in [0, 1]"},
		{loadgen.Mix{Failure: 0.6, Unknown: 0.5}, "the intent shares add up to 1.1, more than 1"},
	} {
		if err := c.mix.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %q", c.mix, err, c.want)
		}
	}
}
