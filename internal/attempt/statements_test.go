package attempt_test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestStatementsPrepare prepares every statement of sql/*.sql against the migrated schema.
func TestStatementsPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	pgtest.PrepareStatements(t, attempt.Statements)
}

// TestCheckListsMatchEnums: the migrations' CHECK lists, read from pg_constraint, hold exactly the
// Go enums the code writes (STYLE.md habit 6), so adding a value on one side only fails here.
func TestCheckListsMatchEnums(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	pool := pgtest.NewPool(t)
	str := func(vs ...[]string) []string { return slices.Concat(vs...) }
	of := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range n {
			out[i] = f(i)
		}
		return out
	}
	statuses, sources, reasons, states, ops := attempt.Statuses(), attempt.Sources(), attempt.Reasons(), attempt.EscalationStates(), events.Operations()
	cases := []struct {
		table, column string
		want          []string
	}{
		{"booking_attempt", "status", of(len(statuses), func(i int) string { return string(statuses[i]) })},
		{"booking_attempt", "resolution_source", of(len(sources), func(i int) string { return string(sources[i]) })},
		{"booking_attempt", "operation", of(len(ops), func(i int) string { return string(ops[i]) })},
		{"escalation", "reason", of(len(reasons), func(i int) string { return string(reasons[i]) })},
		{"escalation", "state", of(len(states), func(i int) string { return string(states[i]) })},
		{"escalation", "closed_by", str(attempt.ClosedBys())},
		{"attempt_transition", "cause", str(attempt.Causes())},
	}
	quoted := regexp.MustCompile(`'([^']*)'`)
	for _, c := range cases {
		var def string
		if err := pool.QueryRow(t.Context(), `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
			JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
			WHERE c.conrelid = $1::regclass AND c.contype = 'c' AND a.attname = $2`, c.table, c.column).Scan(&def); err != nil {
			t.Fatalf("%s.%s: %v", c.table, c.column, err)
		}
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s.%s CHECK holds %v; the Go enum %v", c.table, c.column, got, want)
		}
	}
}
