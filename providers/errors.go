package providers

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrorClass is the class of a failed lookup. The reconciler branches on it
// (docs/design.md#judging-an-answer: a provider error keeps the attempt UNKNOWN and waits at least
// Retry-After); it is also a bounded metric label.
type ErrorClass string

const (
	// ClassTimeout: no answer in time, or the connection broke (client timeout, context
	// deadline, connection reset or refused). The provider may or may not have seen the call.
	ClassTimeout ErrorClass = "timeout"
	// ClassServer: the provider answered with an HTTP 5xx (or its equivalent).
	ClassServer ErrorClass = "5xx"
	// ClassRateLimited: the provider refused the call for its rate limit (HTTP 429); the error's
	// RetryAfter says how long to wait, when the provider said so.
	ClassRateLimited ErrorClass = "rate_limited"
	// ClassContract: the call or the answer breaks the contract — an unknown provider, a lookup
	// kind the provider does not support, an invalid query, a malformed answer. Repeating the
	// same call gives the same error.
	ClassContract ErrorClass = "contract"
)

// ErrorClasses returns every error class, for validation and metric pre-creation.
func ErrorClasses() []ErrorClass {
	return []ErrorClass{ClassTimeout, ClassServer, ClassRateLimited, ClassContract}
}

// Class sentinels: errors.Is(err, ErrRateLimited) is true for every [*Error] of that class.
var (
	// ErrTimeout matches every error of class [ClassTimeout].
	ErrTimeout = errors.New("provider timeout")
	// ErrServer matches every error of class [ClassServer].
	ErrServer = errors.New("provider server error")
	// ErrRateLimited matches every error of class [ClassRateLimited].
	ErrRateLimited = errors.New("provider rate limited")
	// ErrContract matches every error of class [ClassContract].
	ErrContract = errors.New("provider contract violation")
)

// Detail sentinels, carried in [Error.Err] of a [ClassContract] error.
var (
	// ErrUnsupportedLookup: the provider does not answer this lookup kind (it is not in the
	// provider's capability map).
	ErrUnsupportedLookup = errors.New("lookup kind not supported by provider")
	// ErrUnknownProvider: the provider is not known to the endpoint or the capability map.
	ErrUnknownProvider = errors.New("unknown provider")
	// ErrInvalidQuery: the query is incomplete or inconsistent (empty value, unknown kind, a
	// fingerprint lookup without its window); it was not sent.
	ErrInvalidQuery = errors.New("invalid lookup query")
	// ErrMalformedResponse: the provider's answer could not be read as records.
	ErrMalformedResponse = errors.New("malformed provider response")
)

// Error is a classified lookup failure. Every non-nil error a [Provider] returns is (or wraps) an
// *Error; use [ClassOf], [RetryAfter], errors.Is with the class sentinels, or errors.As to read it.
type Error struct {
	// Provider is the provider's name, as in the query.
	Provider string
	// Class says what kind of failure this is.
	Class ErrorClass
	// StatusCode is the HTTP status the provider answered with; 0 when there was no answer.
	StatusCode int
	// RetryAfter is how long the provider asked us to wait (Retry-After, in seconds or as an
	// HTTP date, counted from the adapter's clock); 0 when it did not ask.
	RetryAfter time.Duration
	// Err is the underlying cause (a detail sentinel, a transport error, context.Canceled,
	// context.DeadlineExceeded, ...); may be nil.
	Err error
}

// Error formats the failure as "providers: <provider>: <class> (HTTP <code>, retry after <d>):
// <cause>", leaving out the parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("providers: ")
	if e.Provider != "" {
		b.WriteString(e.Provider)
		b.WriteString(": ")
	}
	b.WriteString(string(e.Class))
	var extra []string
	if e.StatusCode != 0 {
		extra = append(extra, "HTTP "+strconv.Itoa(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		extra = append(extra, "retry after "+e.RetryAfter.String())
	}
	if len(extra) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(extra, ", "))
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrX) true for the class sentinel of e's class.
func (e *Error) Is(target error) bool {
	return target != nil && target == classSentinel(e.Class)
}

func classSentinel(c ErrorClass) error {
	switch c {
	case ClassTimeout:
		return ErrTimeout
	case ClassServer:
		return ErrServer
	case ClassRateLimited:
		return ErrRateLimited
	case ClassContract:
		return ErrContract
	}
	return nil
}

// ClassOf returns the class of the first [*Error] in err's chain, and false when there is none
// (err is nil or was not produced by a provider).
func ClassOf(err error) (ErrorClass, bool) {
	var pe *Error
	if !errors.As(err, &pe) {
		return "", false
	}
	return pe.Class, true
}

// RetryAfter returns how long the provider asked us to wait before the next call, and false when
// err carries no positive Retry-After. Any class may carry one (a 503 may send Retry-After too).
func RetryAfter(err error) (time.Duration, bool) {
	var pe *Error
	if !errors.As(err, &pe) || pe.RetryAfter <= 0 {
		return 0, false
	}
	return pe.RetryAfter, true
}

// IsTransient reports whether err is a provider failure that may go away on its own (timeout,
// 5xx, rate limited), as opposed to a contract error or an unclassified error. It does not say
// when to retry: that is the reconciler's policy.
func IsTransient(err error) bool {
	c, ok := ClassOf(err)
	return ok && c != ClassContract
}
