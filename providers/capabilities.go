package providers

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/bookrecon/bookrecon/events"
)

// Defaults of the capability map (docs/design.md#capability-map), applied to every field a
// provider's entry leaves out.
const (
	// DefaultConsistency is the documented consistency when none is given.
	DefaultConsistency = ConsistencyStrong
	// DefaultConsistencyWindow: a record is visible to lookups as soon as it is created.
	DefaultConsistencyWindow time.Duration = 0
	// DefaultFingerprintWindow is the half-width of a fingerprint lookup's creation window.
	DefaultFingerprintWindow = 10 * time.Minute
	// DefaultMaxProcessingTime is how long a provider may go on after a client or business
	// timeout.
	DefaultMaxProcessingTime = 5 * time.Minute
	// DefaultRPS is the default sustained rate limit, in calls per second.
	DefaultRPS float64 = 10
	// DefaultBurst is the default rate-limit burst, in calls.
	DefaultBurst = 10
	// DefaultDeadline is the default escalation deadline for an UNKNOWN attempt.
	DefaultDeadline = 30 * time.Minute
	// DefaultMaxVersions is the highest operationVersion a safe retry may have.
	DefaultMaxVersions = 3
	// DefaultMaxInFlight is how many lookups a reconciler has in flight at one provider at most.
	DefaultMaxInFlight = 4
)

// Consistency values of the capability map; documentation only, ConsistencyWindow is what counts.
const (
	// ConsistencyStrong: a created record is visible at once (or after ConsistencyWindow).
	ConsistencyStrong = "strong"
	// ConsistencyEventual: a created record may stay invisible for up to ConsistencyWindow.
	ConsistencyEventual = "eventual"
)

// ErrInvalidMap is wrapped by every error [ParseMap] and [LoadMap] return for a map that does
// not parse or does not validate.
var ErrInvalidMap = errors.New("providers: invalid capability map")

// RateLimit is a provider's token-bucket rate limit: RPS calls per second sustained, Burst calls
// at once.
type RateLimit struct {
	// RPS is the sustained rate, in calls per second; > 0.
	RPS float64
	// Burst is the bucket size, in calls; ≥ 1.
	Burst int
}

// Capabilities is one provider's entry of the capability map (docs/design.md#capability-map;
// format of samples/providers.yaml), with the defaults applied.
type Capabilities struct {
	// Name is the provider's name, the key of its entry.
	Name string
	// Lookups are the lookup kinds the provider answers, in the order written, no duplicates;
	// empty means only a person can settle its UNKNOWN attempts. Default: none.
	Lookups []LookupKind
	// Consistency is "strong" or "eventual"; documentation only. Default: strong.
	Consistency string
	// ConsistencyWindow is how long after a record is created a lookup may still miss it.
	// Default: 0.
	ConsistencyWindow time.Duration
	// AuthoritativeNotFound says a not-found from a reference lookup, after the window, means
	// never created. A fingerprint not-found is never authoritative. Default: false.
	AuthoritativeNotFound bool
	// NativeIdempotency says the provider deduplicates creates by key; informational in v1.
	// Default: false.
	NativeIdempotency bool
	// FingerprintWindow is the half-width of the creation window a fingerprint lookup sends
	// around the attempt's start. Default: 10m.
	FingerprintWindow time.Duration
	// MaxProcessingTime is how long the provider may go on after a client or business timeout.
	// Default: 5m.
	MaxProcessingTime time.Duration
	// RateLimit is the provider's rate limit. Default: {10, 10}.
	RateLimit RateLimit
	// Deadline is how long an attempt may stay UNKNOWN before deadline_exceeded, for operations
	// not in DeadlineByOperation. Default: 30m.
	Deadline time.Duration
	// DeadlineByOperation overrides Deadline per operation. Default: empty.
	DeadlineByOperation map[events.Operation]time.Duration
	// MaxVersions is the highest operationVersion a safe retry may have. Default: 3.
	MaxVersions int
	// MaxInFlight is the most lookups one reconciler has in flight at this provider at once
	// (≥ 1), on top of RateLimit: a provider that hangs holds at most this many of the
	// reconciler's workers, each until the call timeout. Default: 4.
	MaxInFlight int
}

// Supports reports whether the provider answers lookups of kind k.
func (c Capabilities) Supports(k LookupKind) bool {
	return slices.Contains(c.Lookups, k)
}

// DeadlineFor returns the escalation deadline for op: DeadlineByOperation[op] when set, Deadline
// otherwise.
func (c Capabilities) DeadlineFor(op events.Operation) time.Duration {
	if d, ok := c.DeadlineByOperation[op]; ok {
		return d
	}
	return c.Deadline
}

func (c Capabilities) clone() Capabilities {
	c.Lookups = slices.Clone(c.Lookups)
	c.DeadlineByOperation = maps.Clone(c.DeadlineByOperation)
	if c.Lookups == nil {
		c.Lookups = []LookupKind{}
	}
	if c.DeadlineByOperation == nil {
		c.DeadlineByOperation = map[events.Operation]time.Duration{}
	}
	return c
}

func defaultCapabilities(name string) Capabilities {
	return Capabilities{
		Name:                name,
		Lookups:             []LookupKind{},
		Consistency:         DefaultConsistency,
		ConsistencyWindow:   DefaultConsistencyWindow,
		FingerprintWindow:   DefaultFingerprintWindow,
		MaxProcessingTime:   DefaultMaxProcessingTime,
		RateLimit:           RateLimit{RPS: DefaultRPS, Burst: DefaultBurst},
		Deadline:            DefaultDeadline,
		DeadlineByOperation: map[events.Operation]time.Duration{},
		MaxVersions:         DefaultMaxVersions,
		MaxInFlight:         DefaultMaxInFlight,
	}
}

// Map is a validated capability map: the capabilities of every known provider. It is immutable
// and safe for concurrent use.
type Map struct {
	caps  map[string]Capabilities
	names []string
}

// Get returns the capabilities of the named provider (a copy the caller may modify) and whether
// the provider is in the map.
func (m *Map) Get(name string) (Capabilities, bool) {
	c, ok := m.caps[name]
	if !ok {
		return Capabilities{}, false
	}
	return c.clone(), true
}

// Names returns the names of every provider in the map, sorted.
func (m *Map) Names() []string { return slices.Clone(m.names) }

// Known reports whether the named provider is in the map (events validation step 7,
// unknown_provider).
func (m *Map) Known(name string) bool {
	_, ok := m.caps[name]
	return ok
}

// LoadMap reads and parses the capability map at path; see [ParseMap].
func LoadMap(path string) (*Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("providers: read capability map: %w", err)
	}
	m, err := ParseMap(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseMap parses a capability map in the YAML format of samples/providers.yaml:
//
//	providers:
//	  NAME:
//	    lookups: [provider_reference, client_reference, fingerprint]
//	    consistency: strong | eventual
//	    consistencyWindow: 3s            # Go duration strings
//	    authoritativeNotFound: true
//	    nativeIdempotency: false
//	    fingerprintWindow: 10m
//	    maxProcessingTime: 10s
//	    rateLimit: {rps: 20, burst: 5}
//	    deadline: 30s
//	    deadlineByOperation: {CANCEL: 1h}
//	    maxVersions: 3
//	    maxInFlight: 4                   # lookups in flight per reconciler, ≥ 1
//
// Absent fields take the defaults above. Unknown fields, unknown lookup kinds or operations,
// wrong types, negative durations and out-of-range numbers are errors; all problems are reported
// at once (errors.Join), each prefixed by its path, all wrapping [ErrInvalidMap].
func ParseMap(data []byte) (*Map, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMap, err)
	}
	var p mapParser
	m := p.parse(doc)
	if len(p.problems) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalidMap, errors.Join(p.problems...))
	}
	return m, nil
}

var providerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

type mapParser struct{ problems []error }

func (p *mapParser) addf(path, format string, args ...any) {
	p.problems = append(p.problems, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (p *mapParser) parse(doc any) *Map {
	root, ok := doc.(map[string]any)
	if !ok {
		p.addf("(root)", "must be a mapping with a providers key")
		return nil
	}
	for _, k := range sortedKeys(root) {
		if k != "providers" {
			p.addf(k, "unknown field")
		}
	}
	raw, ok := root["providers"]
	if !ok || raw == nil {
		p.addf("providers", "missing: at least one provider is required")
		return nil
	}
	provs, ok := raw.(map[string]any)
	if !ok {
		p.addf("providers", "must be a mapping of provider name to capabilities")
		return nil
	}
	if len(provs) == 0 {
		p.addf("providers", "empty: at least one provider is required")
	}
	m := &Map{caps: make(map[string]Capabilities, len(provs))}
	for _, name := range sortedKeys(provs) {
		path := "providers." + name
		if !providerNameRE.MatchString(name) {
			p.addf(path, "invalid provider name (want %s)", providerNameRE)
		}
		m.caps[name] = p.provider(path, name, provs[name])
		m.names = append(m.names, name)
	}
	return m
}

func (p *mapParser) provider(path, name string, raw any) Capabilities {
	c := defaultCapabilities(name)
	if raw == nil {
		return c
	}
	fields, ok := raw.(map[string]any)
	if !ok {
		p.addf(path, "must be a mapping of capability fields")
		return c
	}
	for _, k := range sortedKeys(fields) {
		v := fields[k]
		fp := path + "." + k
		if v == nil {
			if !knownField(k) {
				p.addf(fp, "unknown field")
			}
			continue // null: keep the default
		}
		switch k {
		case "lookups":
			c.Lookups = p.lookups(fp, v)
		case "consistency":
			if s, ok := p.str(fp, v); ok {
				if s != ConsistencyStrong && s != ConsistencyEventual {
					p.addf(fp, "must be %q or %q, got %q", ConsistencyStrong, ConsistencyEventual, s)
				}
				c.Consistency = s
			}
		case "consistencyWindow":
			c.ConsistencyWindow = p.duration(fp, v, c.ConsistencyWindow, true)
		case "authoritativeNotFound":
			c.AuthoritativeNotFound = p.boolean(fp, v)
		case "nativeIdempotency":
			c.NativeIdempotency = p.boolean(fp, v)
		case "fingerprintWindow":
			c.FingerprintWindow = p.duration(fp, v, c.FingerprintWindow, false)
		case "maxProcessingTime":
			c.MaxProcessingTime = p.duration(fp, v, c.MaxProcessingTime, true)
		case "rateLimit":
			c.RateLimit = p.rateLimit(fp, v, c.RateLimit)
		case "deadline":
			c.Deadline = p.duration(fp, v, c.Deadline, false)
		case "deadlineByOperation":
			c.DeadlineByOperation = p.deadlines(fp, v)
		case "maxVersions":
			if n, ok := p.integer(fp, v); ok {
				if n < 1 {
					p.addf(fp, "must be at least 1, got %d", n)
				} else {
					c.MaxVersions = n
				}
			}
		case "maxInFlight":
			if n, ok := p.integer(fp, v); ok {
				if n < 1 {
					p.addf(fp, "must be at least 1, got %d", n)
				} else {
					c.MaxInFlight = n
				}
			}
		default:
			p.addf(fp, "unknown field")
		}
	}
	return c
}

func knownField(k string) bool {
	switch k {
	case "lookups", "consistency", "consistencyWindow", "authoritativeNotFound",
		"nativeIdempotency", "fingerprintWindow", "maxProcessingTime", "rateLimit", "deadline",
		"deadlineByOperation", "maxVersions", "maxInFlight":
		return true
	}
	return false
}

func (p *mapParser) lookups(path string, v any) []LookupKind {
	list, ok := v.([]any)
	if !ok {
		p.addf(path, "must be a list of lookup kinds %v", LookupKinds())
		return []LookupKind{}
	}
	out := make([]LookupKind, 0, len(list))
	for i, item := range list {
		ip := fmt.Sprintf("%s[%d]", path, i)
		s, ok := p.str(ip, item)
		if !ok {
			continue
		}
		k := LookupKind(s)
		switch {
		case !k.Valid():
			p.addf(ip, "unknown lookup kind %q (want one of %v)", s, LookupKinds())
		case slices.Contains(out, k):
			p.addf(ip, "duplicate lookup kind %q", s)
		default:
			out = append(out, k)
		}
	}
	return out
}

func (p *mapParser) rateLimit(path string, v any, def RateLimit) RateLimit {
	fields, ok := v.(map[string]any)
	if !ok {
		p.addf(path, "must be a mapping {rps, burst}")
		return def
	}
	rl := def
	for _, k := range sortedKeys(fields) {
		fp := path + "." + k
		switch k {
		case "rps":
			if fields[k] == nil {
				continue
			}
			if f, ok := p.number(fp, fields[k]); ok {
				if f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
					p.addf(fp, "must be a positive number, got %v", f)
				} else {
					rl.RPS = f
				}
			}
		case "burst":
			if fields[k] == nil {
				continue
			}
			if n, ok := p.integer(fp, fields[k]); ok {
				if n < 1 {
					p.addf(fp, "must be at least 1, got %d", n)
				} else {
					rl.Burst = n
				}
			}
		default:
			p.addf(fp, "unknown field")
		}
	}
	return rl
}

func (p *mapParser) deadlines(path string, v any) map[events.Operation]time.Duration {
	out := map[events.Operation]time.Duration{}
	fields, ok := v.(map[string]any)
	if !ok {
		p.addf(path, "must be a mapping of operation to duration")
		return out
	}
	for _, k := range sortedKeys(fields) {
		fp := path + "." + k
		op := events.Operation(k)
		if !op.Valid() {
			p.addf(fp, "unknown operation %q (want one of %v)", k, events.Operations())
			continue
		}
		if fields[k] == nil {
			continue
		}
		d := p.duration(fp, fields[k], -1, false)
		if d > 0 {
			out[op] = d
		}
	}
	return out
}

func (p *mapParser) str(path string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.addf(path, "must be a string, got %s", describe(v))
	}
	return s, ok
}

func (p *mapParser) boolean(path string, v any) bool {
	b, ok := v.(bool)
	if !ok {
		p.addf(path, "must be true or false, got %s", describe(v))
	}
	return b
}

// duration parses a Go duration string; zero is allowed only when allowZero. On a problem it
// records it and returns def.
func (p *mapParser) duration(path string, v any, def time.Duration, allowZero bool) time.Duration {
	s, ok := v.(string)
	if !ok {
		p.addf(path, "must be a Go duration string such as \"30s\", got %s", describe(v))
		return def
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.addf(path, "must be a Go duration string such as \"30s\", got %q", s)
		return def
	case d < 0:
		p.addf(path, "must not be negative, got %s", s)
		return def
	case d == 0 && !allowZero:
		p.addf(path, "must be positive, got %s", s)
		return def
	}
	return d
}

func (p *mapParser) number(path string, v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	if i, ok := asInt64(v); ok {
		return float64(i), true
	}
	p.addf(path, "must be a number, got %s", describe(v))
	return 0, false
}

func (p *mapParser) integer(path string, v any) (int, bool) {
	i, ok := asInt64(v)
	if !ok || i > math.MaxInt32 || i < math.MinInt32 {
		p.addf(path, "must be an integer, got %s", describe(v))
		return 0, false
	}
	return int(i), true
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%v", v)
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
