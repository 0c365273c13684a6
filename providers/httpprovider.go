package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxResponseBytes bounds the body the HTTP adapter reads from a provider; a larger answer is a
// [ClassContract] error wrapping [ErrMalformedResponse].
const MaxResponseBytes = 1 << 20

// HTTPOption configures the adapter built by [NewHTTP].
type HTTPOption func(*httpProvider)

// WithClock sets the clock the adapter reads Retry-After dates against (default time.Now), so a
// test can turn "Retry-After: <HTTP date>" into an exact duration.
func WithClock(now func() time.Time) HTTPOption {
	return func(p *httpProvider) {
		if now != nil {
			p.now = now
		}
	}
}

// NewHTTP returns a [Provider] that asks an HTTP provider (or providers/simulator) for records:
//
//	GET {baseURL}/v1/providers/{provider}/records?operation=OP&kind=KIND&value=V[&from=RFC3339&to=RFC3339]
//	200 {"records":[{"providerReference","clientReference"|null,"status","createdAt","fingerprint"|null}]}
//
// It maps answers onto the port: 200 → the records (an empty list is not found); 400, 404 and
// any other 4xx but 408 and 429 → [ClassContract] (wrapping [ErrUnsupportedLookup] or
// [ErrUnknownProvider] when the error body names them); 429 → [ClassRateLimited] with RetryAfter
// from the Retry-After header in seconds or as an HTTP date; 5xx → [ClassServer] (with
// RetryAfter when sent); 408, a transport failure (timeout, connection reset or refused) or the
// context's deadline or cancellation → [ClassTimeout] (errors.Is(err, context.Canceled) tells a
// shutdown apart); an unreadable body → [ClassContract] wrapping [ErrMalformedResponse]. An
// invalid query is not sent: [ClassContract] wrapping [ErrInvalidQuery].
//
// The per-call timeout comes from ctx (and client.Timeout, if set). A nil client means
// http.DefaultClient. The adapter never retries on its own; note that Go's transport itself
// replays an idempotent GET once, on a fresh connection, when a reused keep-alive connection is
// reset before any answer — harmless for a read-only lookup, but the provider may count it
// against its rate limit. An invalid baseURL makes every Lookup fail with
// a [ClassContract] error.
func NewHTTP(baseURL string, client *http.Client, opts ...HTTPOption) Provider {
	p := &httpProvider{client: client, now: time.Now}
	if p.client == nil {
		p.client = http.DefaultClient
	}
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		p.baseErr = err
	case u.Scheme != "http" && u.Scheme != "https":
		p.baseErr = fmt.Errorf("base URL %q: scheme must be http or https", baseURL)
	case u.Host == "":
		p.baseErr = fmt.Errorf("base URL %q: missing host", baseURL)
	case u.RawQuery != "" || u.Fragment != "":
		p.baseErr = fmt.Errorf("base URL %q: must have no query or fragment", baseURL)
	default:
		p.base = strings.TrimSuffix(u.String(), "/")
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

type httpProvider struct {
	base    string
	baseErr error
	client  *http.Client
	now     func() time.Time
}

// wireRecord is a record as the HTTP lookup shape carries it.
type wireRecord struct {
	ProviderReference string  `json:"providerReference"`
	ClientReference   *string `json:"clientReference"`
	Status            string  `json:"status"`
	CreatedAt         string  `json:"createdAt"`
	Fingerprint       *string `json:"fingerprint"`
}

type wireRecords struct {
	Records *[]wireRecord `json:"records"`
}

type wireError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Error codes of the HTTP lookup shape's error body, {"error":{"code","message"}}.
const (
	codeUnsupportedLookup = "unsupported_lookup"
	codeUnknownProvider   = "unknown_provider"
	codeInvalidQuery      = "invalid_query"
)

func (p *httpProvider) Lookup(ctx context.Context, q Query) ([]Record, error) {
	if p.baseErr != nil {
		return nil, &Error{Provider: q.Provider, Class: ClassContract, Err: fmt.Errorf("%w: %w", ErrInvalidQuery, p.baseErr)}
	}
	if err := validateQuery(q); err != nil {
		return nil, &Error{Provider: q.Provider, Class: ClassContract, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Provider: q.Provider, Class: ClassTimeout, Err: err}
	}
	v := url.Values{}
	if q.Operation != "" {
		v.Set("operation", string(q.Operation))
	}
	v.Set("kind", string(q.Kind))
	v.Set("value", q.Value)
	if q.Kind == LookupFingerprint {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	target := p.base + "/v1/providers/" + url.PathEscape(q.Provider) + "/records?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, &Error{Provider: q.Provider, Class: ClassContract, Err: fmt.Errorf("%w: %w", ErrInvalidQuery, err)}
	}
	req.Header.Set("Accept", "application/json")

	resp, err := p.client.Do(req)
	if err != nil {
		return nil, &Error{Provider: q.Provider, Class: ClassTimeout, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		// The answer broke off: as for a transport failure, we cannot know what happened.
		return nil, &Error{Provider: q.Provider, Class: ClassTimeout, StatusCode: resp.StatusCode, Err: err}
	}
	if len(body) > MaxResponseBytes {
		return nil, &Error{Provider: q.Provider, Class: ClassContract, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("%w: body larger than %d bytes", ErrMalformedResponse, MaxResponseBytes)}
	}

	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		recs, err := decodeRecords(body)
		if err != nil {
			return nil, &Error{Provider: q.Provider, Class: ClassContract, StatusCode: code, Err: err}
		}
		return recs, nil
	case code == http.StatusTooManyRequests:
		e := &Error{Provider: q.Provider, Class: ClassRateLimited, StatusCode: code, Err: bodyCause(body)}
		e.RetryAfter, _ = ParseRetryAfter(resp.Header.Get("Retry-After"), p.now())
		return nil, e
	case code == http.StatusRequestTimeout:
		return nil, &Error{Provider: q.Provider, Class: ClassTimeout, StatusCode: code, Err: bodyCause(body)}
	case code >= 500 && code <= 599:
		e := &Error{Provider: q.Provider, Class: ClassServer, StatusCode: code, Err: bodyCause(body)}
		e.RetryAfter, _ = ParseRetryAfter(resp.Header.Get("Retry-After"), p.now())
		return nil, e
	default:
		return nil, &Error{Provider: q.Provider, Class: ClassContract, StatusCode: code, Err: contractCause(code, body)}
	}
}

func validateQuery(q Query) error {
	var problems []string
	if q.Provider == "" {
		problems = append(problems, "empty provider")
	}
	if !q.Kind.Valid() {
		problems = append(problems, fmt.Sprintf("unknown lookup kind %q", q.Kind))
	}
	if q.Value == "" {
		problems = append(problems, "empty value")
	}
	if q.Kind == LookupFingerprint {
		switch {
		case q.From.IsZero() || q.To.IsZero():
			problems = append(problems, "fingerprint lookup without its From/To window")
		case q.To.Before(q.From):
			problems = append(problems, "window To before From")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidQuery, strings.Join(problems, "; "))
}

func decodeRecords(body []byte) ([]Record, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var w wireRecords
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformedResponse)
	}
	if w.Records == nil {
		return nil, fmt.Errorf("%w: no records member", ErrMalformedResponse)
	}
	recs := make([]Record, 0, len(*w.Records))
	var problems []error
	for i, r := range *w.Records {
		rec, err := r.record()
		if err != nil {
			problems = append(problems, fmt.Errorf("records[%d]: %w", i, err))
			continue
		}
		recs = append(recs, rec)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, errors.Join(problems...))
	}
	return recs, nil
}

func (r wireRecord) record() (Record, error) {
	var problems []string
	if r.ProviderReference == "" {
		problems = append(problems, "empty providerReference")
	}
	st := RecordStatus(r.Status)
	if !st.Valid() {
		problems = append(problems, fmt.Sprintf("unknown status %q", r.Status))
	}
	created, err := time.Parse(time.RFC3339Nano, r.CreatedAt)
	if err != nil {
		problems = append(problems, fmt.Sprintf("createdAt %q is not RFC 3339", r.CreatedAt))
	}
	if len(problems) > 0 {
		return Record{}, errors.New(strings.Join(problems, "; "))
	}
	rec := Record{ProviderReference: r.ProviderReference, Status: st, CreatedAt: created}
	if r.ClientReference != nil {
		rec.ClientReference = *r.ClientReference
	}
	if r.Fingerprint != nil {
		rec.Fingerprint = *r.Fingerprint
	}
	return rec, nil
}

// bodyCause turns an error body into a cause, when it has the {"error":{...}} shape.
func bodyCause(body []byte) error {
	var w wireError
	if json.Unmarshal(body, &w) != nil || (w.Error.Code == "" && w.Error.Message == "") {
		return nil
	}
	return fmt.Errorf("%s: %s", w.Error.Code, w.Error.Message)
}

func contractCause(status int, body []byte) error {
	var w wireError
	_ = json.Unmarshal(body, &w) // a body in another shape only loses the detail
	msg := w.Error.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	switch w.Error.Code {
	case codeUnsupportedLookup:
		return fmt.Errorf("%w: %s", ErrUnsupportedLookup, msg)
	case codeUnknownProvider:
		return fmt.Errorf("%w: %s", ErrUnknownProvider, msg)
	case codeInvalidQuery:
		return fmt.Errorf("%w: %s", ErrInvalidQuery, msg)
	}
	if status == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrUnknownProvider, msg)
	}
	return errors.New(msg)
}

// ParseRetryAfter reads an HTTP Retry-After value, either delay-seconds ("120") or an HTTP date
// ("Wed, 21 Oct 2026 07:28:00 GMT", counted from now; a past date is 0). It returns false for an
// empty or unreadable value or a negative number.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > math.MaxInt64/int64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
