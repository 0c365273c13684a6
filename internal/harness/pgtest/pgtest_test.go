package pgtest_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestExampleDB: an Example's database is its own (never the server's default one, which a
// developer's runs use) and is gone after drop.
func TestExampleDB(t *testing.T) {
	t.Parallel()
	pgtest.SkipShort(t)
	ctx := context.Background()
	u, drop, err := pgtest.ExampleDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := url.Parse(u)
	def, _ := url.Parse(pgtest.URL())
	name := strings.TrimPrefix(parsed.Path, "/")
	if !strings.HasPrefix(name, "bookrecon_example_") || parsed.Path == def.Path {
		t.Fatalf("example database %q, want bookrecon_example_… and not the default %q", name, def.Path)
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	drop()
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after drop: %d databases named %s (%v), want 0", n, name, err)
	}
}

// recorder is a testing.TB whose cleanups run when the test says (run) and whose errors are
// recorded, not reported: it lets a test watch what NewURL's cleanup does.
type recorder struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// run runs the cleanups, last registered first, as testing does.
func (r *recorder) run() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestNewURLChecksIntegrity: a test whose database is left with an audit row naming no attempt
// fails at cleanup, with the row named; a test that leaves none does not.
func TestNewURLChecksIntegrity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, write string
		want        []string
	}{
		{"clean", `SELECT 1`, nil},
		{"orphan audit row", `INSERT INTO attempt_transition (id, attempt_id, to_status, cause)
			VALUES (41, '00000000-0000-7000-8000-0000000000ff', 'IN_PROGRESS', 'event')`,
			[]string{"pgtest: the test left rows that break referential integrity (migrations.Orphans):\n" +
				"  attempt_transition 41 names attempt 00000000-0000-7000-8000-0000000000ff, which does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			u := pgtest.NewURL(rec)
			c, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, tc.write); err != nil {
				t.Fatal(err)
			}
			c.Close(ctx)
			rec.run()
			if !slices.Equal(rec.errs, tc.want) {
				t.Fatalf("errors at cleanup = %q\nwant %q", rec.errs, tc.want)
			}
		})
	}
}
