package attempt

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

// ErrInvalidData marks an error computed from one item's own data — an attempt whose provider
// is not in the capability map, a kept decision that does not decode: like a
// postgres.IsDataError, every retry of that item meets it again, and no other item does.
var ErrInvalidData = errors.New("invalid data")

// The item failure classes, bounded metric label values: the SQLSTATE class names of
// postgres.IsDataError, and invalid_data for an ErrInvalidData.
const (
	ClassDataException       = "data_exception"                 // SQLSTATE class 22
	ClassIntegrityConstraint = "integrity_constraint_violation" // class 23
	ClassProgramLimit        = "program_limit_exceeded"         // class 54
	ClassInvalidData         = "invalid_data"
)

// NewItemFailures returns bookrecon_item_failures_total{stage, error_class}, the one counter of
// items set aside by every stage (the escalator, the reconciler, the ingester's kept decisions),
// with the series of stages pre-created for every FailureClasses value; the caller registers it.
func NewItemFailures(stages ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_item_failures_total",
		Help: "Items set aside because the database refused their own data, by stage and error class; each is recorded on its row and retried with backoff."},
		[]string{"stage", "error_class"})
	for _, s := range stages {
		for _, c := range FailureClasses() {
			v.WithLabelValues(s, c)
		}
	}
	return v
}

// StageDecision is the stage label of a kept manual decision that failed to apply, whichever
// service's transaction applied it.
const StageDecision = "decision"

// FailureClasses lists every FailureClass value, for metric pre-creation.
func FailureClasses() []string {
	return []string{ClassDataException, ClassIntegrityConstraint, ClassProgramLimit, ClassInvalidData}
}

// FailureClass returns the class of err when it is one item's own failure — PostgreSQL refusing
// the item's data (postgres.IsDataError) or an ErrInvalidData — and "" for everything else: an
// outage (connections, timeouts, conflicts, resources, a cancelled context) or the code's own
// condition, which every item shares and which is never recorded on an item. Callers also check
// their context: a round given up on is not an item's failure.
func FailureClass(err error) string {
	switch {
	case err == nil:
		return ""
	case postgres.IsDataError(err):
		switch postgres.SQLState(err)[:2] {
		case "22":
			return ClassDataException
		case "23":
			return ClassIntegrityConstraint
		default:
			return ClassProgramLimit
		}
	case errors.Is(err, ErrInvalidData):
		return ClassInvalidData
	}
	return ""
}

// maxFailureText bounds the error text kept on a row.
const maxFailureText = 1000

// FailureText is err as a row keeps it: valid UTF-8 without NUL bytes (which text columns
// refuse), at most 1,000 bytes. PostgreSQL's messages name constraints and columns, not values
// (those are in the error's detail, left out).
func FailureText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "")
	if len(s) <= maxFailureText {
		return s
	}
	s = s[:maxFailureText]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
