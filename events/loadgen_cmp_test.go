package events_test

import (
	"bytes"
	"os"
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

// BenchmarkDecodeAgainstRef is BenchmarkDecodeAttemptHashed (decode, hash and Digests of every
// valid record) on the samples and on a loadgen run of the happy mix, for the decode path (new)
// and the old one (ref) in the same run: their ratio is the saving, whatever the machine's load.
func BenchmarkDecodeAgainstRef(b *testing.B) {
	file, err := os.ReadFile("../samples/attempts.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	happy := loadgen.Generate(loadgen.Config{Intents: 200, Seed: 7, Start: time.Now(),
		Mix: loadgen.Mix{Failure: 0.10, Redeliveries: 0.05}})
	for _, set := range []struct {
		name string
		recs [][]byte
	}{{"samples", bytes.Split(bytes.TrimRight(file, "\n"), []byte("\n"))}, {"loadgen", happy.Records}} {
		var recs [][]byte
		for _, r := range set.recs {
			if _, _, err := events.DecodeAttemptHashed(r, events.DecodeOptions{}); err == nil {
				recs = append(recs, r)
			}
		}
		for _, impl := range []struct {
			name    string
			decode  func([]byte, events.DecodeOptions) (events.Attempt, string, error)
			digests func(events.Attempt) (events.Digests, error)
		}{{"ref", events.RefDecodeAttemptHashed, events.RefDigests},
			{"new", events.DecodeAttemptHashed, events.Attempt.Digests}} {
			b.Run(set.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := range b.N {
					a, _, err := impl.decode(recs[i%len(recs)], events.DecodeOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := impl.digests(a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
