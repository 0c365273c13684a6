package events_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
)

// TestLoadgenMatchesRef: on every record of loadgen runs (the benchmarks' happy mix, the
// default mix and one with every kind) the decode path gives exactly what the old one gives:
// the same Attempt, event hash and Digests, and no error.
func TestLoadgenMatchesRef(t *testing.T) {
	t.Parallel()

	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, mix := range []loadgen.Mix{
		{Failure: 0.10, Redeliveries: 0.05},
		loadgen.DefaultMix,
		{Failure: 0.2, Unknown: 0.2, NotSent: 0.1, OutOfOrder: 0.1, KeyConflict: 0.1, BlindRetry: 0.1},
	} {
		out := loadgen.Generate(loadgen.Config{Intents: 500, Seed: 7, Start: start, Mix: mix})
		for _, raw := range out.Records {
			a, h, err := events.DecodeAttemptHashed(raw, events.DecodeOptions{})
			ra, rh, rerr := events.RefDecodeAttemptHashed(raw, events.DecodeOptions{})
			if err != nil || rerr != nil || !reflect.DeepEqual(a, ra) || h != rh {
				t.Fatalf("%s: DecodeAttemptHashed = %+v, %q, %v; ref %+v, %q, %v", raw, a, h, err, ra, rh, rerr)
			}
			d, err := a.Digests()
			rd, rerr := events.RefDigests(ra)
			if err != nil || rerr != nil || d != rd {
				t.Fatalf("%s: Digests = %+v, %v; ref %+v, %v", raw, d, err, rd, rerr)
			}
		}
	}
}
