// Package pgtest gives each test its own migrated PostgreSQL database, cloned from a template
// that is migrated once per schema hash (github.com/peterldowns/pgtestdb). The server is the one
// scripts/stack.sh starts; BOOKRECON_DATABASE_URL overrides it. A test that stops its server
// takes a cluster of its own instead (OwnCluster). Under -short (`make test-short`, which runs
// without the stack) every helper that takes a testing.TB skips its test instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for pgtestdb
	"github.com/peterldowns/pgtestdb"

	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/migrations"
)

// URL is the server's admin URL: BOOKRECON_DATABASE_URL or postgres.DefaultURL.
func URL() string {
	if u := os.Getenv("BOOKRECON_DATABASE_URL"); u != "" {
		return u
	}
	return postgres.DefaultURL
}

// SkipShort skips t under -short: it needs the PostgreSQL server, and `make test-short` runs
// without the stack. Every helper of this package that takes a testing.TB calls it; a test
// that opens PostgreSQL at URL itself calls it first.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: needs PostgreSQL (BOOKRECON_DATABASE_URL); skipped under -short")
	}
}

type migrator struct{}

func (migrator) Hash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	_, err := migrations.Up(ctx, db)
	return err
}

func config() pgtestdb.Config {
	u, err := url.Parse(URL())
	if err != nil {
		panic(err)
	}
	pw, _ := u.User.Password()
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       u.Hostname(),
		Port:       u.Port(),
		User:       u.User.Username(),
		Password:   pw,
		Database:   u.Path[1:],
		Options:    "sslmode=disable",
	}
}

// NewURL creates a fresh migrated database for t and returns its URL; it is dropped when t
// passes and kept for inspection when it fails. Before it is dropped, t fails if the database
// holds a row that breaks what the foreign keys dropped by migration 00009 held
// (migrations.Orphans): every test that writes through the write path checks it.
func NewURL(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	u := pgtestdb.Custom(t, config(), migrator{}).URL()
	t.Cleanup(func() { checkOrphans(t, u) }) // runs before pgtestdb's drop: cleanups run last-in first
	return u
}

// checkOrphans fails t with up to ten rows of its database that break referential integrity
// (migrations.Orphans), unless t has failed already.
func checkOrphans(t testing.TB, dbURL string) {
	if t.Failed() {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Errorf("pgtest: integrity check after the test: %v", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	orphans, err := migrations.Orphans(ctx, conn, 10)
	if err != nil {
		t.Errorf("pgtest: integrity check after the test: %v", err)
		return
	}
	if len(orphans) > 0 {
		t.Errorf("pgtest: the test left rows that break referential integrity (migrations.Orphans):\n  %s",
			strings.Join(orphans, "\n  "))
	}
}

// NewEmptyURL is NewURL without the migrations: a fresh empty database, for tests of migrating.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	return pgtestdb.Custom(t, config(), pgtestdb.NoopMigrator{}).URL()
}

// NewPool is NewURL plus a pool closed at cleanup.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := NewURL(t)
	pool, err := postgres.Open(context.Background(), u, 20)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ExampleDB creates an empty database of its own for a runnable Example (which has no
// testing.TB for NewURL), named bookrecon_example_<random>, and returns its URL and a function
// that drops it. Examples never touch the server's default database.
func ExampleDB(ctx context.Context) (string, func(), error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	name := "bookrecon_example_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("pgtest: create %s: %w", name, err)
	}
	u, err := url.Parse(URL())
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), URL())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// PrepareStatements prepares every statement of s on a fresh migrated database, so a typo, a
// renamed column or a wrong parameter type in a `.sql` file fails the package's tests even when
// no test runs that statement. Each package that loads statements calls it from one test.
func PrepareStatements(t testing.TB, s *postgres.Statements) {
	t.Helper()
	pool := NewPool(t)
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, name := range s.Names() {
		if _, err := conn.Conn().Prepare(t.Context(), name, s.SQL(name)); err != nil {
			t.Errorf("statement %s does not prepare: %v", name, err)
		}
	}
}
