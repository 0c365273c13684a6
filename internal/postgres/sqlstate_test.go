package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

// TestSQLStatePredicates classifies one error of each kind by every predicate: PostgreSQL
// errors by SQLSTATE, wrapped or not, and errors that are not PostgreSQL's.
func TestSQLStatePredicates(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("insert: %w", &pgconn.PgError{Code: code}) }
	type verdict struct{ retryable, data, outage, statement, createRace, unmigrated bool }
	for _, c := range []struct {
		name string
		err  error
		want verdict
	}{
		{"nil", nil, verdict{}},
		{"not PostgreSQL's", errors.New("connection refused"), verdict{outage: true}},
		{"cancelled", context.Canceled, verdict{outage: true}},
		{"connection exception 08006", pg("08006"), verdict{outage: true}},
		{"serialization failure 40001", pg("40001"), verdict{retryable: true, outage: true}},
		{"deadlock 40P01", pg("40P01"), verdict{retryable: true, outage: true}},
		{"disk full 53100", pg("53100"), verdict{outage: true}},
		{"admin shutdown 57P01", pg("57P01"), verdict{outage: true}},
		{"statement timeout 57014", pg("57014"), verdict{outage: true}},
		{"io error 58030", pg("58030"), verdict{outage: true}},
		{"internal error XX000", pg("XX000"), verdict{outage: true}},
		{"NUL in text 22021", pg("22021"), verdict{data: true, statement: true}},
		{"value out of range 22003", pg("22003"), verdict{data: true, statement: true}},
		{"check violation 23514", pg("23514"), verdict{data: true, statement: true}},
		{"unique violation 23505", pg("23505"), verdict{data: true, statement: true, createRace: true}},
		{"index row too large 54000", pg("54000"), verdict{data: true, statement: true}},
		{"undefined column 42703", pg("42703"), verdict{statement: true, unmigrated: true}},
		{"undefined table 42P01", pg("42P01"), verdict{statement: true, unmigrated: true}},
		{"undefined function 42883", pg("42883"), verdict{statement: true}},
		{"duplicate table 42P07", pg("42P07"), verdict{statement: true, createRace: true}},
		{"insufficient privilege 42501", pg("42501"), verdict{statement: true}},
	} {
		got := verdict{postgres.IsRetryable(c.err), postgres.IsDataError(c.err), postgres.IsOutage(c.err),
			postgres.IsStatementError(c.err), postgres.IsCreateRace(c.err), postgres.IsUnmigrated(c.err)}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
