// Package loadgen generates realistic booking-attempt traffic for load runs and benchmarks: a
// configurable mix of straight successes, definitive failures, every timeout class, producer
// redeliveries, key conflicts, blind retries and out-of-order pairs. It also writes the matching
// provider truth for the simulator and the expected end state of every attempt, so a run far
// larger than the sample can be checked (see internal/harness/check).
package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/bookrecon/bookrecon/providers"
)

// Mix gives the share of each kind of intent; the rest are straight successes.
type Mix struct {
	Failure      float64 // attempt.failed, definitive (retryable)
	Unknown      float64 // outcome_unknown, settled by the reconciler from the truth
	NotSent      float64 // connect_timeout with requestSent false → FAILED not_sent
	OutOfOrder   float64 // the outcome published before the start
	KeyConflict  float64 // a second start under the same key with another request
	BlindRetry   float64 // v2 started while v1 is UNKNOWN
	Redeliveries float64 // share of records published twice (producer retries)
}

// Validate reports a share outside [0, 1], and the intent shapes (every share but
// Redeliveries) adding up to more than 1: one draw picks one shape per intent.
func (m Mix) Validate() error {
	var errs []error
	for _, s := range []struct {
		name string
		v    float64
	}{{"failure", m.Failure}, {"unknown", m.Unknown}, {"not-sent", m.NotSent}, {"out-of-order", m.OutOfOrder},
		{"key-conflict", m.KeyConflict}, {"blind-retry", m.BlindRetry}, {"redeliveries", m.Redeliveries}} {
		if s.v < 0 || s.v > 1 || math.IsNaN(s.v) {
			errs = append(errs, fmt.Errorf("%s share %v is not in [0, 1]", s.name, s.v))
		}
	}
	if sum := m.Failure + m.Unknown + m.NotSent + m.OutOfOrder + m.KeyConflict + m.BlindRetry; sum > 1 {
		errs = append(errs, fmt.Errorf("the intent shares add up to %.3g, more than 1", sum))
	}
	return errors.Join(errs...)
}

// DefaultMix is a production-like mix.
var DefaultMix = Mix{Failure: 0.10, Unknown: 0.10, NotSent: 0.02, OutOfOrder: 0.03, KeyConflict: 0.01, BlindRetry: 0.01, Redeliveries: 0.05}

// Config shapes a run.
type Config struct {
	Intents int
	Seed    uint64
	Start   time.Time     // occurredAt of the first event
	Spacing time.Duration // occurredAt step between events (default 1ms)
	Tenant  string        // default "t_load"
	Mix     Mix
}

// Expected is the end state an attempt must reach.
type Expected struct {
	TenantID          string `json:"tenantId"`
	IdempotencyKey    string `json:"idempotencyKey"`
	Status            string `json:"status"` // CONFIRMED or FAILED
	Source            string `json:"resolutionSource"`
	ProviderReference string `json:"providerReference,omitempty"`
}

// Output is a generated run.
type Output struct {
	Records      [][]byte // in publish order, redeliveries included
	Keys         [][]byte // record keys (bookingIntentId)
	UniqueEvents int
	Truth        map[string][]providers.Record
	Expected     []Expected
	// Anomalies counts the key conflicts and blind retries the run contains.
	KeyConflicts, BlindRetries int
}

type event map[string]any

// Generate builds a run; the same Config gives the same bytes.
func Generate(cfg Config) Output {
	if cfg.Tenant == "" {
		cfg.Tenant = "t_load"
	}
	if cfg.Spacing == 0 {
		cfg.Spacing = time.Millisecond
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	out := Output{Truth: map[string][]providers.Record{}}
	at := cfg.Start
	seq := 0
	next := func() time.Time { at = at.Add(cfg.Spacing); return at }
	emit := func(e event) {
		b, _ := json.Marshal(e)
		out.Records = append(out.Records, b)
		out.Keys = append(out.Keys, []byte(e["bookingIntentId"].(string)))
		out.UniqueEvents++
		if rng.Float64() < cfg.Mix.Redeliveries {
			out.Records = append(out.Records, b)
			out.Keys = append(out.Keys, []byte(e["bookingIntentId"].(string)))
		}
	}
	base := func(intent string, version int, typ string, t time.Time) event {
		seq++
		return event{"specVersion": 1, "eventId": fmt.Sprintf("ev_%s_v%d_%s_%d", intent, version, typ[8:], seq),
			"eventType": typ, "occurredAt": t.UTC().Format(time.RFC3339Nano), "tenantId": cfg.Tenant,
			"bookingIntentId": intent, "operation": "BOOK", "operationVersion": version,
			"idempotencyKey": fmt.Sprintf("book:%s:v%d", intent, version), "provider": "sim-hotels"}
	}
	start := func(intent string, version int, t time.Time, price string) event {
		e := base(intent, version, "attempt.started", t)
		e["request"] = map[string]any{"offerVersion": "off:1", "travellerRef": "tr_" + intent,
			"stay":   map[string]any{"propertyId": "h_1", "checkIn": "2027-01-10", "checkOut": "2027-01-12"},
			"amount": map[string]any{"value": price, "currency": "EUR"}}
		e["recovery"] = map[string]any{"clientReference": fmt.Sprintf("cr_%s_v%d", intent, version)}
		return e
	}
	for i := range cfg.Intents {
		intent := fmt.Sprintf("bi_%07d", i)
		key := fmt.Sprintf("book:%s:v1", intent)
		ref := fmt.Sprintf("HTL-%07d", i)
		r := rng.Float64()
		m := cfg.Mix
		st := start(intent, 1, next(), "120.00")
		switch {
		case r < m.Failure:
			f := base(intent, 1, "attempt.failed", next())
			f["outcome"] = map[string]any{"failureCode": "NO_AVAILABILITY", "retryable": true}
			emit(st)
			emit(f)
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "FAILED", "event", ""})
		case r < m.Failure+m.Unknown:
			u := base(intent, 1, "attempt.outcome_unknown", next())
			u["outcome"] = map[string]any{"timeoutClass": []string{"read_timeout", "connection_reset", "connect_timeout"}[i%3]}
			emit(st)
			emit(u)
			if rng.IntN(2) == 0 {
				out.Truth["sim-hotels"] = append(out.Truth["sim-hotels"], providers.Record{ProviderReference: ref,
					ClientReference: fmt.Sprintf("cr_%s_v1", intent), Status: providers.StatusConfirmed, CreatedAt: at})
				out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "CONFIRMED", "client_reference", ref})
			} else {
				out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "FAILED", "authoritative_not_found", ""})
			}
		case r < m.Failure+m.Unknown+m.NotSent:
			u := base(intent, 1, "attempt.outcome_unknown", next())
			u["outcome"] = map[string]any{"timeoutClass": "connect_timeout", "requestSent": false}
			emit(st)
			emit(u)
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "FAILED", "not_sent", ""})
		case r < m.Failure+m.Unknown+m.NotSent+m.OutOfOrder:
			s := base(intent, 1, "attempt.succeeded", next())
			s["outcome"] = map[string]any{"providerReference": ref}
			emit(s)
			emit(st)
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "CONFIRMED", "event", ref})
		case r < m.Failure+m.Unknown+m.NotSent+m.OutOfOrder+m.KeyConflict:
			s := base(intent, 1, "attempt.succeeded", next())
			s["outcome"] = map[string]any{"providerReference": ref}
			emit(st)
			emit(start(intent, 1, next(), "999.00")) // same key, other request: key_conflict
			emit(s)
			out.KeyConflicts++
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "CONFIRMED", "event", ref})
		case r < m.Failure+m.Unknown+m.NotSent+m.OutOfOrder+m.KeyConflict+m.BlindRetry:
			u := base(intent, 1, "attempt.outcome_unknown", next())
			u["outcome"] = map[string]any{"timeoutClass": "read_timeout"}
			emit(st)
			emit(u)
			v2 := start(intent, 2, next(), "120.00")
			s2 := base(intent, 2, "attempt.succeeded", next())
			s2["outcome"] = map[string]any{"providerReference": ref + "-2"}
			emit(v2)
			emit(s2)
			out.BlindRetries++
			// v1 absent at the provider: authoritative not-found.
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "FAILED", "authoritative_not_found", ""},
				Expected{cfg.Tenant, fmt.Sprintf("book:%s:v2", intent), "CONFIRMED", "event", ref + "-2"})
		default:
			s := base(intent, 1, "attempt.succeeded", next())
			s["outcome"] = map[string]any{"providerReference": ref}
			emit(st)
			emit(s)
			out.Expected = append(out.Expected, Expected{cfg.Tenant, key, "CONFIRMED", "event", ref})
		}
	}
	return out
}
