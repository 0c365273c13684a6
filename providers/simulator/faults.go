package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Fault names what the simulator did to one call instead of (or before) answering it normally.
type Fault string

const (
	// FaultNone: the call was answered normally.
	FaultNone Fault = ""
	// FaultRateLimit: the provider's own rate limit ({rps, burst} of the capability map) refused
	// the call: 429 with Retry-After in whole seconds.
	FaultRateLimit Fault = "rate_limit"
	// FaultServerError: an injected 503.
	FaultServerError Fault = "5xx"
	// FaultSlow: the answer was held back for Faults.SlowDelay (or until the client gave up).
	FaultSlow Fault = "slow"
	// FaultRateLimitSeconds: an injected 429 with Retry-After in seconds.
	FaultRateLimitSeconds Fault = "rate_limited_seconds"
	// FaultRateLimitDate: an injected 429 with Retry-After as an HTTP date.
	FaultRateLimitDate Fault = "rate_limited_date"
	// FaultStaleNotFound: an empty answer although records exist.
	FaultStaleNotFound Fault = "stale_not_found"
	// FaultConnectionReset: the connection was hijacked and closed without an answer.
	FaultConnectionReset Fault = "connection_reset"
)

// Defaults of [Faults] fields left zero.
const (
	// DefaultSlowDelay is how long a slow answer is held back.
	DefaultSlowDelay = 5 * time.Second
	// DefaultFaultRetryAfter is the Retry-After of an injected 429.
	DefaultFaultRetryAfter = time.Second
)

// Faults switches the simulator's injected failures. Each lookup call to a provider the faults
// apply to draws one number from the simulator's seeded RNG and suffers at most one fault, each
// with its own probability (their sum must not exceed 1); for a given seed and sequence of calls
// the faults are deterministic. The zero value injects nothing. In JSON (PUT /admin/faults) the
// fields are camelCase and durations are Go duration strings.
type Faults struct {
	// Providers limits the faults to these providers; empty means every provider.
	Providers []string
	// ServerError is the probability of a 503.
	ServerError float64
	// Slow is the probability of an answer held back for SlowDelay, then given normally.
	Slow float64
	// SlowDelay is how long a slow answer is held back; 0 means [DefaultSlowDelay].
	SlowDelay time.Duration
	// RateLimitSeconds is the probability of a 429 with "Retry-After: <seconds>".
	RateLimitSeconds float64
	// RateLimitDate is the probability of a 429 with "Retry-After: <HTTP date>": now +
	// RetryAfter on the simulator's clock, rounded up to the next whole second (an HTTP date has
	// no fraction), so a client on the same clock never comes back early.
	RateLimitDate float64
	// RetryAfter is the wait an injected 429 asks for, rounded up to whole seconds; 0 means
	// [DefaultFaultRetryAfter].
	RetryAfter time.Duration
	// StaleNotFound is the probability of an empty answer although records exist.
	StaleNotFound float64
	// ConnectionReset is the probability of closing the connection without an answer.
	ConnectionReset float64
}

type faultsJSON struct {
	Providers        []string `json:"providers,omitempty"`
	ServerError      float64  `json:"serverError"`
	Slow             float64  `json:"slow"`
	SlowDelay        string   `json:"slowDelay,omitempty"`
	RateLimitSeconds float64  `json:"rateLimitSeconds"`
	RateLimitDate    float64  `json:"rateLimitDate"`
	RetryAfter       string   `json:"retryAfter,omitempty"`
	StaleNotFound    float64  `json:"staleNotFound"`
	ConnectionReset  float64  `json:"connectionReset"`
}

// MarshalJSON writes f with camelCase fields and Go duration strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	j := faultsJSON{
		Providers: f.Providers, ServerError: f.ServerError, Slow: f.Slow,
		RateLimitSeconds: f.RateLimitSeconds, RateLimitDate: f.RateLimitDate,
		StaleNotFound: f.StaleNotFound, ConnectionReset: f.ConnectionReset,
	}
	if f.SlowDelay != 0 {
		j.SlowDelay = f.SlowDelay.String()
	}
	if f.RetryAfter != 0 {
		j.RetryAfter = f.RetryAfter.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads f from camelCase fields and Go duration strings; unknown fields are errors.
func (f *Faults) UnmarshalJSON(data []byte) error {
	var j faultsJSON
	if err := strictUnmarshal(data, &j); err != nil {
		return err
	}
	out := Faults{
		Providers: j.Providers, ServerError: j.ServerError, Slow: j.Slow,
		RateLimitSeconds: j.RateLimitSeconds, RateLimitDate: j.RateLimitDate,
		StaleNotFound: j.StaleNotFound, ConnectionReset: j.ConnectionReset,
	}
	var problems []error
	for _, d := range []struct {
		name string
		in   string
		out  *time.Duration
	}{{"slowDelay", j.SlowDelay, &out.SlowDelay}, {"retryAfter", j.RetryAfter, &out.RetryAfter}} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %q is not a Go duration", d.name, d.in))
		}
		*d.out = v
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	*f = out
	return nil
}

// Validate reports every problem of f at once: probabilities outside [0, 1], a sum above 1,
// negative durations.
func (f Faults) Validate() error {
	var problems []error
	sum := 0.0
	for _, p := range []struct {
		name string
		v    float64
	}{
		{"serverError", f.ServerError}, {"slow", f.Slow}, {"rateLimitSeconds", f.RateLimitSeconds},
		{"rateLimitDate", f.RateLimitDate}, {"staleNotFound", f.StaleNotFound},
		{"connectionReset", f.ConnectionReset},
	} {
		if !(p.v >= 0 && p.v <= 1) { // also rejects NaN
			problems = append(problems, fmt.Errorf("%s: probability %v outside [0, 1]", p.name, p.v))
			continue
		}
		sum += p.v
	}
	if sum > 1+1e-9 {
		problems = append(problems, fmt.Errorf("probabilities add up to %v, more than 1", sum))
	}
	if f.SlowDelay < 0 {
		problems = append(problems, fmt.Errorf("slowDelay: negative %s", f.SlowDelay))
	}
	if f.RetryAfter < 0 {
		problems = append(problems, fmt.Errorf("retryAfter: negative %s", f.RetryAfter))
	}
	if len(problems) > 0 {
		return fmt.Errorf("simulator: invalid faults: %w", errors.Join(problems...))
	}
	return nil
}

func (f Faults) active() bool {
	return f.ServerError+f.Slow+f.RateLimitSeconds+f.RateLimitDate+f.StaleNotFound+f.ConnectionReset > 0
}

func (f Faults) appliesTo(provider string) bool {
	return len(f.Providers) == 0 || slices.Contains(f.Providers, provider)
}

// pick maps a uniform draw u in [0, 1) onto at most one fault.
func (f Faults) pick(u float64) Fault {
	for _, c := range []struct {
		p     float64
		fault Fault
	}{
		{f.ServerError, FaultServerError}, {f.Slow, FaultSlow},
		{f.RateLimitSeconds, FaultRateLimitSeconds}, {f.RateLimitDate, FaultRateLimitDate},
		{f.StaleNotFound, FaultStaleNotFound}, {f.ConnectionReset, FaultConnectionReset},
	} {
		if u < c.p {
			return c.fault
		}
		u -= c.p
	}
	return FaultNone
}

func (f Faults) slowDelay() time.Duration {
	if f.SlowDelay > 0 {
		return f.SlowDelay
	}
	return DefaultSlowDelay
}

// retryAfterSeconds is the injected Retry-After in whole seconds, at least 1.
func (f Faults) retryAfterSeconds() int64 {
	d := f.RetryAfter
	if d <= 0 {
		d = DefaultFaultRetryAfter
	}
	return ceilSeconds(d)
}

func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
