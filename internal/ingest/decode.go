package ingest

import (
	"runtime"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
)

// item is one record of a batch after decoding.
type item struct {
	rec      *kgo.Record
	attempt  *events.Attempt
	decision *events.Decision
	hash     string // CanonicalHash of the record
	// digests are the attempt's request hash and fingerprint (empty unless a start).
	digests events.Digests
	invalid *events.InvalidError
}

func (in *Ingester) decode(r *kgo.Record, opt events.DecodeOptions) item {
	it := item{rec: r}
	var err error
	switch r.Topic {
	case in.cfg.Topics.Decisions:
		var d events.Decision
		d, it.hash, err = events.DecodeDecisionHashed(r.Value, opt)
		if err == nil {
			it.decision = &d
		}
	default:
		var a events.Attempt
		a, it.hash, err = events.DecodeAttemptHashed(r.Value, opt)
		if err == nil {
			it.attempt = &a
			// The request digests too, here where decoding runs in parallel; the bulk path uses them.
			if it.digests, err = a.Digests(); err != nil {
				it.attempt = nil
			}
		}
	}
	if err != nil {
		inv, ok := events.AsInvalid(err)
		if !ok {
			inv = &events.InvalidError{Reason: events.ReasonInvalidJSON, Detail: "undecodable"}
		}
		it.invalid = inv
	}
	return it
}

// decodeAll decodes a batch on every core: validation and RFC 8785 canonicalisation are the
// ingester's CPU cost, and the database waits meanwhile anyway.
func (in *Ingester) decodeAll(recs []*kgo.Record) []item {
	opt := events.DecodeOptions{KnownProvider: in.cfg.Providers.Known, MinOccurredAt: in.parts.minOccurred()}
	items := make([]item, len(recs))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(recs)/64))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(recs); i += workers {
				items[i] = in.decode(recs[i], opt)
			}
		})
	}
	wg.Wait()
	return items
}
