package migrations

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

//go:embed integrity/*.sql
var integrityFiles embed.FS

// IntegrityStatements are the named statements of integrity/*.sql (Orphans).
var IntegrityStatements = postgres.MustLoadStatements(integrityFiles, "integrity/*.sql")

// Querier is what Orphans reads through: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Orphans returns up to limit descriptions of rows that break what the foreign keys dropped by
// migration 00009 held (docs/decisions.md "No foreign keys on the hot path"): an audit row
// (attempt_transition) or a provider-reference claim naming an attempt that does not exist, an
// attempt naming an intent that does not exist. Empty is the healthy answer; the error is the
// read's. pgtest runs it after every test's database, the run checker on every run it checks.
func Orphans(ctx context.Context, q Querier, limit int) ([]string, error) {
	rows, err := q.Query(ctx, IntegrityStatements.SQL("schema_orphans"), limit)
	if err != nil {
		return nil, fmt.Errorf("migrations: orphans: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("migrations: orphans: %w", err)
	}
	return out, nil
}
