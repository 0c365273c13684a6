// Package migrations holds bookrecon's PostgreSQL schema as numbered SQL files embedded in every
// binary, applied by goose (github.com/pressly/goose/v3) under a PostgreSQL advisory lock so that
// several services starting together cannot race (STYLE.md habit 16).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var files embed.FS

// FS returns the embedded migration files (sql/NNNNN_name.sql).
func FS() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// Up applies every pending migration to db, each in its own transaction, holding a session
// advisory lock for the whole run. It returns the schema version reached.
func Up(ctx context.Context, db *sql.DB) (int64, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, fmt.Errorf("migrations: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(), goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("migrations: provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrations: up: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return v, nil
}

// UpPool is Up over a pgx pool (through pgx's database/sql adapter).
func UpPool(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return Up(ctx, db)
}
