package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/processedevent"
)

// raceEnv is a migrated database plus the store configuration the ingester would use.
type raceEnv struct {
	fast  bool // the ingester's set-based path (InsertMany, Bulk) instead of the per-event one
	pool  *pgxpool.Pool
	cfg   attempt.Config
	known func(string) bool
	store processedevent.Store
	base  time.Time
}

// paths runs fn once per ingester path, each in its own parallel subtest and database.
func paths(t *testing.T, fn func(t *testing.T, e *raceEnv)) {
	for _, fast := range []bool{false, true} {
		name := "per-event"
		if fast {
			name = "fast"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newRaceEnv(t)
			e.fast = fast
			fn(t, e)
		})
	}
}

func newRaceEnv(t *testing.T) *raceEnv {
	t.Helper()
	pool := pgtest.NewPool(t)
	pm, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]attempt.Policy{}
	for _, name := range pm.Names() {
		c, _ := pm.Get(name)
		p := attempt.Policy{MaxVersions: c.MaxVersions}
		for _, l := range c.Lookups {
			p.Lookups = append(p.Lookups, string(l))
		}
		policies[name] = p
	}
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	if err := processedevent.EnsurePartitions(context.Background(), pool, base, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &raceEnv{pool: pool, known: pm.Known, base: base,
		cfg:   attempt.Config{Policies: policies, FirstCheck: time.Second, ResolutionsTopic: "res", EscalationsTopic: "esc"},
		store: processedevent.Store{Consumer: "race-test/" + events.TopicAttempts}}
}

// raw builds one valid record: BOOK vN of intent at sim-hotels; ref "" makes attempt.started,
// otherwise attempt.succeeded with that provider reference.
func (e *raceEnv) raw(t *testing.T, id, tenant, intent string, version int, ref string, at time.Duration) []byte {
	t.Helper()
	a := events.Attempt{SpecVersion: 1, EventID: id, EventType: events.EventStarted, OccurredAt: e.base.Add(at),
		TenantID: tenant, BookingIntentID: intent, Operation: events.OpBook, OperationVersion: version,
		IdempotencyKey: fmt.Sprintf("book:%s:v%d", intent, version), Provider: "sim-hotels"}
	if ref == "" {
		a.Request = &events.Request{OfferVersion: fmt.Sprintf("off:%d", version), TravellerRef: "tr_1",
			Amount: &events.Amount{Value: "120.00", Currency: "EUR"},
			Stay:   &events.Stay{PropertyID: "h_1", CheckIn: "2027-05-01", CheckOut: "2027-05-03"}}
		a.Recovery.ClientReference = "cr_" + intent
	} else {
		a.EventType, a.Outcome = events.EventSucceeded, &events.Outcome{ProviderReference: ref}
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// apply is the ingester's path for one record inside tx; mid (when set) runs between the
// insert-first dedup row and the apply. Per-event (ingest.applyOne): savepoint,
// processedevent.Store.Insert, attempt.Tx.ApplyEvent. Fast (ingest.applyFast): Store.InsertMany,
// attempt.Tx.NewBulk, then Bulk.Apply (buffered, or ApplyEvent) and Flush.
func (e *raceEnv) apply(ctx context.Context, tx pgx.Tx, raw []byte, mid func()) (processedevent.Outcome, error) {
	ev, err := events.DecodeAttempt(raw, events.DecodeOptions{KnownProvider: e.known})
	if err != nil {
		return 0, err
	}
	hash, err := events.CanonicalHash(raw)
	if err != nil {
		return 0, err
	}
	pe := processedevent.Event{TenantID: ev.TenantID, EventID: ev.EventID, OccurredAt: ev.OccurredAt, Hash: hash}
	codes := events.DefaultTransportTimeoutCodes()
	if e.fast {
		dedup, err := e.store.InsertMany(ctx, tx, []processedevent.Event{pe})
		if err != nil {
			return 0, err
		}
		if mid != nil {
			mid()
		}
		if dedup[0] != processedevent.Applied {
			return dedup[0], nil
		}
		at := attempt.NewTx(tx, &e.cfg)
		rh, err := ev.Digests()
		if err != nil {
			return 0, err
		}
		bulk, err := at.NewBulk(ctx, []events.Attempt{ev}, nil, codes)
		if err != nil {
			return 0, err
		}
		if err := bulk.Apply(ctx, ev, rh); err != nil {
			return 0, err
		}
		return processedevent.Applied, bulk.Flush(ctx)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sp.Rollback(ctx) }()
	o, err := e.store.Insert(ctx, sp, pe)
	if err != nil {
		return 0, err
	}
	if mid != nil {
		mid()
	}
	if o == processedevent.Applied {
		if _, err := attempt.NewTx(sp, &e.cfg).ApplyEvent(ctx, ev, codes); err != nil {
			return 0, err
		}
	}
	return o, sp.Commit(ctx)
}

// applyOne applies raw alone, committed.
func (e *raceEnv) applyOne(t *testing.T, raw []byte) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if o, err := e.apply(ctx, tx, raw, nil); err != nil || o != processedevent.Applied {
		t.Fatalf("apply: %v, %v", o, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// barrier releases its n parties together; a party that gives up passes without waiting, so
// the others are never stranded.
type barrier struct {
	mu      sync.Mutex
	n, seen int
	open    chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) pass() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen++; b.seen == b.n {
		close(b.open)
	}
}

func (b *barrier) wait() { b.pass(); <-b.open }

// concurrently applies raws[i] in transaction i, all at once: every transaction has run its first
// statement before any goes on (first barrier), and, with both set, every one has inserted its
// dedup row before any applies its event (second barrier). It returns each transaction's outcome
// and error; the commits overlap freely.
func (e *raceEnv) concurrently(raws [][]byte, dedupBarrier bool) ([]processedevent.Outcome, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a deadlock fails, not hangs
	defer cancel()
	first, second := newBarrier(len(raws)), newBarrier(len(raws))
	outs, errs := make([]processedevent.Outcome, len(raws)), make([]error, len(raws))
	var wg sync.WaitGroup
	for i, raw := range raws {
		wg.Go(func() {
			passedFirst, passedSecond := false, false
			defer func() {
				if !passedFirst {
					first.pass()
				}
				if dedupBarrier && !passedSecond {
					second.pass()
				}
			}()
			tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			var xid int64
			if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
				errs[i] = err
				return
			}
			passedFirst = true
			first.wait()
			var mid func()
			if dedupBarrier {
				mid = func() { passedSecond = true; second.wait() }
			}
			if outs[i], errs[i] = e.apply(ctx, tx, raw, mid); errs[i] != nil {
				return
			}
			errs[i] = tx.Commit(ctx)
		})
	}
	wg.Wait()
	return outs, errs
}

func (e *raceEnv) scalar(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *raceEnv) escalated(t *testing.T, tenant, key, reason string) int {
	t.Helper()
	return e.scalar(t, `SELECT count(*) FROM escalation x JOIN booking_attempt a ON a.id = x.attempt_id
		WHERE a.tenant_id = $1 AND a.idempotency_key = $2 AND x.reason = $3`, tenant, key, reason)
}

// TestConcurrentSameEvent applies one eventId in two concurrent transactions through each of
// the ingester's paths (insert-first dedup, then the apply), 50 rounds: exactly one applies, the
// other sees a duplicate, and the effect (attempt, audit row, resolution) exists once.
func TestConcurrentSameEvent(t *testing.T) {
	t.Parallel()
	paths(t, func(t *testing.T, e *raceEnv) {
		for r := range 50 {
			intent := fmt.Sprintf("bi_same_%02d", r)
			ref := "" // even rounds: a start; odd rounds: an outcome that creates the attempt CONFIRMED
			if r%2 == 1 {
				ref = "HTL-SAME-" + intent
			}
			raw := e.raw(t, "evt-same-"+intent, "t_race", intent, 1, ref, time.Duration(r)*time.Second)
			outs, errs := e.concurrently([][]byte{raw, raw}, false)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d tx %d: %v", r, i, err)
				}
			}
			applied := 0
			for _, o := range outs {
				if o == processedevent.Applied {
					applied++
				} else if o != processedevent.Duplicate {
					t.Errorf("round %d: outcome %v", r, o)
				}
			}
			if applied != 1 {
				t.Errorf("round %d: %d transactions applied the event, want exactly 1", r, applied)
			}
			key := "book:" + intent + ":v1"
			for _, c := range []struct {
				what string
				n    int
				want int
			}{
				{"processed_event rows", e.scalar(t, `SELECT count(*) FROM processed_event WHERE event_id = $1`, "evt-same-"+intent), 1},
				{"attempts", e.scalar(t, `SELECT count(*) FROM booking_attempt WHERE idempotency_key = $1`, key), 1},
				{"audit rows", e.scalar(t, `SELECT count(*) FROM attempt_transition x JOIN booking_attempt a ON a.id = x.attempt_id WHERE a.idempotency_key = $1`, key), 1},
				{"resolutions", e.scalar(t, `SELECT count(*) FROM outbox WHERE topic = 'res' AND record_key = $1`, []byte(intent)), r % 2},
			} {
				if c.n != c.want {
					t.Errorf("round %d: %s = %d, want %d", r, c.what, c.n, c.want)
				}
			}
		}
	})
}

// TestConcurrentDuplicateBooking is sc12's shape: BOOK v1 and v2 of one intent turn CONFIRMED
// with different provider references in two overlapping transactions, 30 rounds (even rounds
// from IN_PROGRESS, odd rounds created by the outcome). Whichever commits first, the second must
// see the first's CONFIRMED and escalate duplicate_booking on both attempts; on both paths.
func TestConcurrentDuplicateBooking(t *testing.T) {
	t.Parallel()
	paths(t, func(t *testing.T, e *raceEnv) {
		for r := range 30 {
			intent := fmt.Sprintf("bi_dupb_%02d", r)
			at := time.Duration(r) * time.Minute
			if r%2 == 0 {
				e.applyOne(t, e.raw(t, "evt-s1-"+intent, "t_race", intent, 1, "", at))
				e.applyOne(t, e.raw(t, "evt-s2-"+intent, "t_race", intent, 2, "", at+time.Second))
			}
			outs, errs := e.concurrently([][]byte{
				e.raw(t, "evt-ok1-"+intent, "t_race", intent, 1, "HTL-B1-"+intent, at+2*time.Second),
				e.raw(t, "evt-ok2-"+intent, "t_race", intent, 2, "HTL-B2-"+intent, at+3*time.Second),
			}, true)
			for i := range errs {
				if errs[i] != nil || outs[i] != processedevent.Applied {
					t.Fatalf("round %d tx %d: %v, %v", r, i, outs[i], errs[i])
				}
			}
			for v := 1; v <= 2; v++ {
				key := fmt.Sprintf("book:%s:v%d", intent, v)
				if n := e.scalar(t, `SELECT count(*) FROM booking_attempt WHERE idempotency_key = $1 AND status = 'CONFIRMED'`, key); n != 1 {
					t.Errorf("round %d: %s not CONFIRMED", r, key)
				}
				if n := e.escalated(t, "t_race", key, "duplicate_booking"); n != 1 {
					t.Errorf("round %d: %s has %d duplicate_booking escalations, want 1", r, key, n)
				}
			}
		}
	})
}

// TestConcurrentDuplicateProviderReference is sc16's shape: one provider reference reported for
// two different intents' BOOK attempts (odd rounds in two tenants) in two overlapping
// transactions, 30 rounds (even rounds from IN_PROGRESS, odd ones created by the outcome).
// The intents' locks do not serialise them; the claim must, and both attempts must be escalated
// duplicate_provider_reference; on both paths.
func TestConcurrentDuplicateProviderReference(t *testing.T) {
	t.Parallel()
	paths(t, func(t *testing.T, e *raceEnv) {
		for r := range 30 {
			ia, ib := fmt.Sprintf("bi_dupr_%02d_a", r), fmt.Sprintf("bi_dupr_%02d_b", r)
			ta, tb := "t_race", "t_race"
			if r%2 == 1 {
				tb = "t_race_other"
			}
			at := time.Duration(r) * time.Minute
			if r%2 == 0 {
				e.applyOne(t, e.raw(t, "evt-s-"+ia, ta, ia, 1, "", at))
				e.applyOne(t, e.raw(t, "evt-s-"+ib, tb, ib, 1, "", at))
			}
			ref := fmt.Sprintf("HTL-SHARED-%02d", r)
			outs, errs := e.concurrently([][]byte{
				e.raw(t, "evt-ok-"+ia, ta, ia, 1, ref, at+time.Second),
				e.raw(t, "evt-ok-"+ib, tb, ib, 1, ref, at+time.Second),
			}, true)
			for i := range errs {
				if errs[i] != nil || outs[i] != processedevent.Applied {
					t.Fatalf("round %d tx %d: %v, %v", r, i, outs[i], errs[i])
				}
			}
			for _, a := range []struct{ tenant, intent string }{{ta, ia}, {tb, ib}} {
				key := "book:" + a.intent + ":v1"
				if n := e.escalated(t, a.tenant, key, "duplicate_provider_reference"); n != 1 {
					t.Errorf("round %d: %s/%s has %d duplicate_provider_reference escalations, want 1", r, a.tenant, key, n)
				}
			}
			if n := e.scalar(t, `SELECT count(*) FROM provider_reference_claim WHERE reference = $1`, ref); n != 1 {
				t.Errorf("round %d: %d claims of %s, want 1", r, n, ref)
			}
		}
	})
}
