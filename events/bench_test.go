package events

import (
	"testing"
)

// BenchmarkDecodeAttemptHashed decodes, validates and hashes every record of
// samples/attempts.jsonl that is valid, then computes its Digests: the ingester's per-record
// CPU work before the database (docs/performance.md).
func BenchmarkDecodeAttemptHashed(b *testing.B) {
	var recs [][]byte
	for _, line := range sampleLines(b, "attempts.jsonl") {
		if _, _, err := DecodeAttemptHashed(line, DecodeOptions{}); err == nil {
			recs = append(recs, line)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a, _, err := DecodeAttemptHashed(recs[i%len(recs)], DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.Digests(); err != nil {
			b.Fatal(err)
		}
	}
}
