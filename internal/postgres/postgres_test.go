package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

const base = "postgres://u:p@127.0.0.1:5432/d?sslmode=disable"

// TestParseConfigPooler: behind a transaction pooler no statement is prepared by name — pgx's
// cache_describe mode without statement cache, or the URL's exec / simple_protocol — and the
// modes that need one session across round trips are refused; elsewhere pgx's default stays.
func TestParseConfigPooler(t *testing.T) {
	for _, c := range []struct {
		url    string
		pooler postgres.Pooler
		want   pgx.QueryExecMode
		cache  bool // statement cache on
		err    bool
	}{
		{base, "", pgx.QueryExecModeCacheStatement, true, false},
		{base, postgres.PoolerNone, pgx.QueryExecModeCacheStatement, true, false},
		{base, postgres.PoolerSession, pgx.QueryExecModeCacheStatement, true, false},
		{base, postgres.PoolerTransaction, pgx.QueryExecModeCacheDescribe, false, false},
		{base + "&default_query_exec_mode=exec", postgres.PoolerTransaction, pgx.QueryExecModeExec, false, false},
		{base + "&default_query_exec_mode=simple_protocol", postgres.PoolerTransaction, pgx.QueryExecModeSimpleProtocol, false, false},
		{base + "&default_query_exec_mode=cache_describe", postgres.PoolerTransaction, pgx.QueryExecModeCacheDescribe, false, false},
		{base + "&default_query_exec_mode=cache_statement", postgres.PoolerTransaction, 0, false, true},
		{base + "&default_query_exec_mode=describe_exec", postgres.PoolerTransaction, 0, false, true},
		{"host=127.0.0.1 user=u dbname=d default_query_exec_mode=describe_exec", postgres.PoolerTransaction, 0, false, true},
		{base, "statement", 0, false, true},
	} {
		cfg, err := postgres.ParseConfig(c.url, postgres.Options{MaxConns: 3, Pooler: c.pooler})
		if c.err {
			if !errors.Is(err, postgres.ErrConfig) {
				t.Errorf("%s, pooler %q: err = %v, want an ErrConfig", c.url, c.pooler, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s, pooler %q: %v", c.url, c.pooler, err)
			continue
		}
		cc := cfg.ConnConfig
		if cc.DefaultQueryExecMode != c.want || (cc.StatementCacheCapacity > 0) != c.cache || cfg.MaxConns != 3 {
			t.Errorf("%s, pooler %q: mode %v, statement cache %d, max conns %d; want %v, cache %v, 3",
				c.url, c.pooler, cc.DefaultQueryExecMode, cc.StatementCacheCapacity, cfg.MaxConns, c.want, c.cache)
		}
	}
}

// TestBehindTransactionPooler runs what the services' statements rely on — parameters of every
// kind, arrays into unnest, CopyFrom, CollectRows, savepoints — many times over through PgBouncer
// in transaction mode on more client connections than it has server sessions, so that each
// client meets sessions other clients used: nothing may fail for a prepared statement.
func TestBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct := pgtest.NewURL(t)
	setup, err := postgres.Open(ctx, direct, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	if _, err := setup.Exec(ctx, `CREATE TABLE pooler_probe (id bigint PRIMARY KEY, name text NOT NULL, at timestamptz, doc jsonb)`); err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.OpenWith(ctx, pgtest.Bouncer(t, direct), postgres.Options{MaxConns: 2 * pgtest.BouncerPoolSize, Pooler: postgres.PoolerTransaction})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			errs <- func() error {
				for i := range 20 {
					id := int64(w*1000 + i)
					err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
						if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pooler_probe"}, []string{"id", "name", "at", "doc"},
							pgx.CopyFromRows([][]any{{id, "copied", time.Now(), map[string]any{"w": w}}})); err != nil {
							return err
						}
						return postgres.Savepoint(ctx, tx, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, `UPDATE pooler_probe p SET name = u.name FROM unnest($1::bigint[], $2::text[]) AS u(id, name) WHERE p.id = u.id`,
								[]int64{id}, []string{"updated"})
							return err
						})
					})
					if err != nil {
						return err
					}
					rows, err := pool.Query(ctx, `SELECT id, name FROM pooler_probe WHERE id = ANY($1) AND at <= $2`, []int64{id}, time.Now())
					if err != nil {
						return err
					}
					got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
						ID   int64
						Name string
					}])
					if err != nil {
						return err
					}
					if len(got) != 1 || got[0].Name != "updated" {
						return errors.New("read back a wrong row")
					}
				}
				return nil
			}()
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("behind the pooler: %v", err)
		}
	}
}

// TestUUIDBinary: a pool's connections encode uuid.UUID parameters, uuid[] arrays and COPY
// columns, and scan uuid results into uuid.UUID, *uuid.UUID and []uuid.UUID, in the binary uuid
// form (registerUUID) — the plan is not pgx's driver.Valuer one, which formats the text form —
// and the values PostgreSQL stores and returns are the same as through the text form.
func TestUUIDBinary(t *testing.T) {
	ctx := t.Context()
	pool, err := postgres.Open(ctx, pgtest.NewURL(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	u1, u2 := uuid.MustParse("0b7c6f1e-94a5-4c3e-8d1b-2f6a9e0c4d17"), uuid.MustParse("f0e1d2c3-b4a5-4968-8776-655443322110")
	m := conn.Conn().TypeMap()
	for _, v := range []any{u1, []uuid.UUID{u1, u2}, &u1} {
		oid := uint32(pgtype.UUIDOID)
		if _, ok := v.([]uuid.UUID); ok {
			oid = pgtype.UUIDArrayOID
		}
		plan := m.PlanEncode(oid, pgtype.BinaryFormatCode, v)
		if plan == nil || strings.Contains(fmt.Sprintf("%T", plan), "DriverValuer") {
			t.Errorf("%T: encode plan %T, want the binary uuid plan", v, plan)
		}
	}
	var got uuid.UUID
	var text string
	var arr []uuid.UUID
	var null *uuid.UUID
	keep := u2 // NULL into a uuid.UUID leaves it as it was (uuid.UUID's own Scan)
	err = conn.QueryRow(ctx, "SELECT $1::uuid, $1::uuid::text, $2::uuid[], NULL::uuid, NULL::uuid", u1, []uuid.UUID{u1, u2}).
		Scan(&got, &text, &arr, &null, &keep)
	if err != nil {
		t.Fatal(err)
	}
	if got != u1 || text != u1.String() || !slices.Equal(arr, []uuid.UUID{u1, u2}) || null != nil || keep != u2 {
		t.Errorf("got %v, %q, %v, %v, %v; want %v, %q, [%v %v], <nil>, %v", got, text, arr, null, keep, u1, u1.String(), u1, u2, u2)
	}
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE uuid_copy (id uuid, ids uuid[])"); err != nil {
		t.Fatal(err)
	}
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"uuid_copy"}, []string{"id", "ids"}, pgx.CopyFromRows([][]any{{u1, []uuid.UUID{u2}}, {u2, []uuid.UUID{}}}))
	if err != nil || n != 2 {
		t.Fatalf("copy: %d rows, %v", n, err)
	}
	var rows string
	if err := conn.QueryRow(ctx, "SELECT string_agg(id::text || ' ' || ids::text, ', ' ORDER BY id) FROM uuid_copy").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if want := u1.String() + " {" + u2.String() + "}, " + u2.String() + " {}"; rows != want {
		t.Errorf("copied rows %q, want %q", rows, want)
	}
}
