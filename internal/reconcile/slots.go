package reconcile

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/providers"
)

// slots is the reconciler's capacity: Workers checks at once and, per provider of the
// capability map, at most its MaxInFlight lookups at once (a check holds its provider's slot
// from its claim to its write). A provider missing from the map has no slots of its own: its
// checks fail for their data (attempt.ErrInvalidData) before any lookup.
type slots struct {
	workers  chan struct{}
	provider map[string]chan struct{}
	names    []string // of provider, sorted
	// freed receives (coalesced) whenever a slot is given back: the claim loop waits on it.
	freed    chan struct{}
	inFlight *prometheus.GaugeVec
}

func newSlots(workers int, m *providers.Map, x *Metrics) *slots {
	s := &slots{workers: make(chan struct{}, workers), provider: map[string]chan struct{}{}, names: m.Names(),
		freed: make(chan struct{}, 1), inFlight: x.LookupsInFlight}
	for _, name := range s.names {
		c, _ := m.Get(name)
		s.provider[name] = make(chan struct{}, max(c.MaxInFlight, 1))
	}
	return s
}

// limits is what the claim loop may claim now, besides its free workers: nothing of the full
// providers, at most caps[i] attempts of names[i].
type limits struct {
	full  []string
	names []string
	caps  []int32
}

// filled reports whether claimed used up the slots of a provider: the due attempts of that
// provider beyond its cap were left, so the others' may be claimable.
func (l limits) filled(claimed []Claimed) bool {
	per := map[string]int{}
	for _, c := range claimed {
		per[c.Row.Provider]++
	}
	for i, name := range l.names {
		if per[name] >= int(l.caps[i]) {
			return true
		}
	}
	return false
}

// freeWorkers is how many checks could start now; only the claim loop takes slots in Run, so
// the count can only grow until it takes them.
func (s *slots) freeWorkers() int { return cap(s.workers) - len(s.workers) }

// limits returns the providers' free lookup slots.
func (s *slots) limits() limits {
	var l limits
	for _, name := range s.names {
		ch := s.provider[name]
		if free := cap(ch) - len(ch); free == 0 {
			l.full = append(l.full, name)
		} else {
			l.names, l.caps = append(l.names, name), append(l.caps, int32(free))
		}
	}
	return l
}

// take holds a worker and a slot of provider for a claimed check (claimed within limits, so it
// does not wait).
func (s *slots) take(provider string) {
	s.workers <- struct{}{}
	_ = s.takeProvider(context.Background(), provider)
}

// give returns what take held.
func (s *slots) give(provider string) {
	s.giveProvider(provider)
	s.giveWorker()
}

func (s *slots) takeWorker(ctx context.Context) error {
	select {
	case s.workers <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slots) giveWorker() {
	<-s.workers
	s.signal()
}

// takeProvider waits for a lookup slot of provider.
func (s *slots) takeProvider(ctx context.Context, provider string) error {
	ch, ok := s.provider[provider]
	if !ok {
		return nil
	}
	select {
	case ch <- struct{}{}:
		s.inFlight.WithLabelValues(provider).Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slots) giveProvider(provider string) {
	ch, ok := s.provider[provider]
	if !ok {
		return
	}
	<-ch
	s.inFlight.WithLabelValues(provider).Dec()
	s.signal()
}

func (s *slots) signal() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// drainFreed forgets the slots given back so far (the claim loop is about to count them).
func (s *slots) drainFreed() {
	select {
	case <-s.freed:
	default:
	}
}
