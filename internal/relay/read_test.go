package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// explainNode is one node of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).
type explainNode struct {
	NodeType     string        `json:"Node Type"`
	RelationName string        `json:"Relation Name"`
	IndexName    string        `json:"Index Name"`
	ActualRows   int64         `json:"Actual Rows"`
	SharedHit    int64         `json:"Shared Hit Blocks"`
	SharedRead   int64         `json:"Shared Read Blocks"`
	Plans        []explainNode `json:"Plans"`
}

// scans lists the node types of the plan that read outbox itself (not the parking probe's
// outbox_parked), as "type index".
func (n explainNode) scans() []string {
	var out []string
	if n.RelationName == "outbox" && n.IndexName != "outbox_parked" {
		out = append(out, n.NodeType+" "+n.IndexName)
	}
	if n.NodeType == "Sort" {
		out = append(out, "Sort")
	}
	for _, c := range n.Plans {
		out = append(out, c.scans()...)
	}
	return out
}

// explainRound runs the round's read exactly as Relay.read sends it (roundRead), under EXPLAIN
// (ANALYZE, BUFFERS, FORMAT JSON), with the plan cache mode given (custom: the plan of these
// values; generic: the plan pgx's cached statement may switch to after five executions).
func explainRound(t *testing.T, pool *pgxpool.Pool, mode string) explainNode {
	t.Helper()
	ctx := context.Background()
	var js []byte
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode); err != nil {
			return err
		}
		br := tx.SendBatch(ctx, roundRead("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmts.SQL("outbox_select_round"), 500, []string{}))
		defer func() { _ = br.Close() }()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&js); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []struct{ Plan explainNode }
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatal(err)
	}
	return out[0].Plan
}

// TestRoundReadSkipsPublishedRows reproduces the line's shape (docs/performance.md, "The
// relay's round read, sometimes runaway"): a writer's transaction is always open, inserting the
// next batch, while the relay publishes and deletes the batch committed before it; autovacuum
// has not come to the table yet (off here, so the test does not depend on when it comes). After
// 20 batches of 1,000 rows published, the round read must still be the ordered scan of
// outbox_pending — no sort, no bitmap heap scan — in both plan cache modes, and must visit far
// fewer buffers than the table has heap pages: the ordered scan steps over the entries of rows
// deleted before the open transaction began (marked LP_DEAD by the scans before it) and visits
// only the heap of the open batch and of the rows deleted since it began. Left to the planner,
// the custom plan was a bitmap heap scan and a sort visiting every heap page of every row deleted
// since the last vacuum (1,969 buffers for 1,910 heap pages here, growing with every row
// published; 242 with the plan pinned).
func TestRoundReadSkipsPublishedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.FakeClient(t, kafkatest.Fake(t, 1, "out"))
	rl := &Relay{Pool: pool, Client: cl, Logger: slog.New(slog.DiscardHandler)}

	const batches, perBatch = 20, 1000
	value := make([]byte, 600)
	for i := range value {
		value[i] = 'v'
	}
	msgs := func(b int) []outbox.Message {
		ms := make([]outbox.Message, perBatch)
		for i := range ms {
			id := fmt.Sprintf("b%02d-%04d", b, i)
			ms[i] = outbox.Message{Topic: "out", Key: []byte(fmt.Sprintf("k%d", i%50)), Value: value, EventID: id}
		}
		return ms
	}
	// open begins the writer's next transaction with its batch inserted, not committed.
	open := func(b int) pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := outbox.InsertMany(ctx, tx, msgs(b)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.InsertMany(ctx, tx, msgs(0)) }); err != nil {
		t.Fatal(err)
	}
	published := 0
	for b := 1; b <= batches; b++ {
		tx := open(b)
		for {
			n, err := rl.RunOnce(ctx, 500)
			if err != nil {
				t.Fatal(err)
			}
			published += n
			if n == 0 {
				break
			}
		}
		if b < batches {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The last batch stays open while the round read is measured.
		defer func() { _ = tx.Rollback(ctx) }()
	}
	if published != batches*perBatch {
		t.Fatalf("published %d rows, want %d", published, batches*perBatch)
	}
	var heapPages int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('outbox') / current_setting('block_size')::int`).Scan(&heapPages); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for round := range 3 {
			p := explainRound(t, pool, mode)
			buffers := p.SharedHit + p.SharedRead
			t.Logf("%s round %d: %d rows, %d buffers (%d heap pages), scans %v", mode, round, p.ActualRows, buffers, heapPages, p.scans())
			if got := fmt.Sprint(p.scans()); got != "[Index Scan outbox_pending]" {
				t.Errorf("%s: the round read scans outbox by %s, want [Index Scan outbox_pending]", mode, got)
			}
			if p.ActualRows != 0 {
				t.Errorf("%s: the round read returned %d rows, want 0 (every committed row published)", mode, p.ActualRows)
			}
			if buffers*4 > heapPages {
				t.Errorf("%s: the round read visited %d buffers, want at most a quarter of the table's %d heap pages", mode, buffers, heapPages)
			}
		}
	}
}
