// Package relay publishes the transactional outbox (internal/outbox) to Kafka: Relay reads
// pending rows in id order, produces them in order per (topic, record key) and marks them
// published by deleting them (outbox_fact keeps their facts, so a re-derived fact is still a
// no-op; docs/decisions.md "The outbox writes less"). One relay is active at a time for the whole outbox, elected by the outbox_lease row
// with a fencing token (lease.go). A relay runs inside each service that writes outbox rows —
// the ingester, the reconciler and the escalator — and nowhere else (docs/decisions.md, "Where
// relays run"); ForService starts one for service.Run. Its SQL is sql/outbox.sql and
// sql/outbox_lease.sql.
package relay

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// stmts are the relay's named statements (sql/outbox.sql, sql/outbox_lease.sql).
var stmts = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// Config configures a Relay. Zero values take the documented defaults.
type Config struct {
	// Holder names this relay in outbox_lease (default "relay-" and a random UUID; any unique
	// string; ForService gives the service's name and a UUID).
	Holder string
	// LeaseTTL is how long an assertion of the lease lasts (default 10s); the holder re-asserts it
	// every third of that and stops publishing LeaseMargin before its own deadline, so it stops
	// before another relay can take the lease over.
	LeaseTTL time.Duration
	// LeaseMargin (default LeaseTTL/5) covers the produce requests still in flight when the
	// holder stops.
	LeaseMargin time.Duration
	// Batch is the most rows published per round (default 500).
	Batch int
	// Interval is the pause when the outbox is empty (default 100ms).
	Interval time.Duration
	// RetryInitial and RetryMax shape the backoff of a row that failed transiently while others
	// were published: RetryInitial × 2^(failures−1), at most RetryMax (defaults 200ms, 30s).
	RetryInitial, RetryMax time.Duration
	// TopicPause is how long a topic stays paused after a topic or authorization error before
	// one of its rows is tried again; it doubles on every further such error, to at most 1 min
	// (default 1s).
	TopicPause time.Duration
	// Topics pre-creates the metric series of these topics (the service's output topics).
	Topics []string
}

func (c Config) withDefaults() Config {
	c.Holder = cmp.Or(c.Holder, "relay-"+uuid.NewString())
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 10*time.Second)
	c.LeaseMargin = cmp.Or(c.LeaseMargin, c.LeaseTTL/5)
	c.Batch = cmp.Or(c.Batch, 500)
	c.Interval = cmp.Or(c.Interval, 100*time.Millisecond)
	c.RetryInitial = cmp.Or(c.RetryInitial, 200*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 30*time.Second)
	c.TopicPause = cmp.Or(c.TopicPause, time.Second)
	return c
}

// Classify returns the class of a produce error: record errors are the record's own (the broker
// refuses it whatever happens around it), topic and authorization errors hit every row of the
// topic, and everything else is transient. It classifies by franz-go's typed errors, never by
// message text.
func Classify(err error) outbox.ErrorClass {
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		return outbox.ClassRecordTooLarge
	case errors.Is(err, kerr.RecordListTooLarge):
		return outbox.ClassRecordListTooLarge
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidTimestamp), errors.Is(err, kerr.CorruptMessage):
		return outbox.ClassInvalidRecord
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidTopicException):
		return outbox.ClassTopic
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return outbox.ClassAuthorization
	}
	return outbox.ClassTransient
}

// Metrics are the relay's series.
type Metrics struct {
	// PublishFailures counts failed publishes of a row by topic and error class
	// (bookrecon_outbox_publish_failures_total); a record class means the row was set aside.
	PublishFailures *prometheus.CounterVec
	// TopicPaused is 1 while a topic is paused by a topic or authorization error
	// (bookrecon_outbox_topic_paused).
	TopicPaused *prometheus.GaugeVec
	// Unmarked counts rows published whose mark failed or was fenced off by a lost lease: they are
	// published again (bookrecon_outbox_unmarked_total). Every repeat on an output topic is one.
	Unmarked prometheus.Counter
	// Active is 1 while this relay holds the outbox lease (bookrecon_outbox_relay_active).
	Active prometheus.Gauge
}

// NewMetrics registers the relay's series on reg (nil: not registered), pre-creating those
// of topics.
func NewMetrics(reg prometheus.Registerer, topics []string) *Metrics {
	m := &Metrics{
		PublishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_outbox_publish_failures_total",
			Help: "Outbox rows whose publish failed, by topic and error class; record classes (record_too_large, record_list_too_large, invalid_record) set the row aside."},
			[]string{"topic", "error_class"}),
		TopicPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bookrecon_outbox_topic_paused",
			Help: "1 while the relay has paused a topic after a topic or authorization error, else 0."}, []string{"topic"}),
		Unmarked: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_outbox_unmarked_total",
			Help: "Outbox rows published whose mark failed or was fenced off by a lost lease; they are published again (consumers deduplicate by eventId)."}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bookrecon_outbox_relay_active",
			Help: "1 while this service's relay holds the outbox lease and publishes, else 0."}),
	}
	if reg != nil {
		reg.MustRegister(m.PublishFailures, m.TopicPaused, m.Unmarked, m.Active)
	}
	for _, t := range topics {
		m.TopicPaused.WithLabelValues(t)
		for _, c := range outbox.ErrorClasses() {
			m.PublishFailures.WithLabelValues(t, string(c))
		}
	}
	return m
}

// Relay publishes outbox rows in id order, in order per (topic, record key), and isolates what it
// cannot publish: a row the broker refuses for its own sake is set aside with its error (kept,
// listed by outbox.SetAside, released by outbox.Retry or outbox.Discard) and parks its (topic,
// record key) — the key's later rows wait, every other key flows; a topic or authorization error
// pauses that topic (readiness false, TopicPaused); a transient failure of some rows retries them
// with backoff (retry_at, also parking their keys); a failure of every row is an outage that
// pauses the round.
// Rows published are marked one by one, so one failure never republishes the others.
//
// One relay publishes at a time for the whole outbox, elected by the outbox_lease row with a
// fencing token (see lease): it re-asserts the lease every third of LeaseTTL, checks it before
// every produce and (in SQL) every mark, puts the token on every record (TokenHeader), and stops
// before its lease can lapse for anyone else. Nothing depends on a session, so it runs through a
// transaction pooler.
type Relay struct {
	Pool    *pgxpool.Pool
	Client  *kgo.Client
	Config  Config
	Logger  *slog.Logger
	Metrics *Metrics // nil: a set of its own, unregistered
	// Published, when set, is called with the number of records of each round.
	Published func(n int)

	once   sync.Once
	lease  *lease
	mu     sync.Mutex
	paused map[string]topicPause
	// pauseLog logs the rounds an outage fails: when it starts, then every 30 s with repeats.
	pauseLog    *telemetry.Repeated
	testSignals testSignals
}

// testSignals are the relay's test signals (river's clientTestSignals): unexported, zero in
// production, set by this package's tests (export_test.go) before the relay's first use.
type testSignals struct {
	// leaseDelay runs before every lease assertion (tests delay a renewal past the lease).
	leaseDelay func()
	// beforeMark runs between a round's produce and its mark (tests lapse the lease there).
	beforeMark func()
}

// topicPause is a topic paused after a topic or authorization error.
type topicPause struct {
	until time.Time
	wait  time.Duration
	err   string
}

func (r *Relay) init() {
	r.once.Do(func() {
		r.Config = r.Config.withDefaults()
		if r.Metrics == nil {
			r.Metrics = NewMetrics(nil, r.Config.Topics)
		}
		if r.Logger == nil {
			r.Logger = slog.Default()
		}
		r.paused = map[string]topicPause{}
		r.pauseLog = &telemetry.Repeated{Logger: r.Logger, Level: slog.LevelWarn, Msg: "outbox relay paused"}
		r.lease = &lease{pool: r.Pool, holder: r.Config.Holder, ttl: r.Config.LeaseTTL, margin: r.Config.LeaseMargin, delay: r.testSignals.leaseDelay}
	})
}

// Ready returns nil unless a topic is paused; then an error naming the paused topics and why,
// for /readyz.
func (r *Relay) Ready() error {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, t := range slices.Sorted(maps.Keys(r.paused)) {
		errs = append(errs, fmt.Errorf("outbox: topic %s paused: %s", t, r.paused[t].err))
	}
	return errors.Join(errs...)
}

// Run publishes until ctx ends, while it holds the outbox lease; a relay without it re-asserts
// it every third of LeaseTTL. A round that fails (an outage of the database or the broker) is
// tried again a second later; "outbox relay paused" is logged when that starts and then at most
// every 30 s with repeats (telemetry.Repeated), "outbox relay resumed" when a round succeeds
// again. At the end it gives the lease up so another relay takes over at once.
func (r *Relay) Run(ctx context.Context) error {
	r.init()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		r.lease.release(rctx)
		r.Metrics.Active.Set(0)
	}()
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx, r.Config.Batch)
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost) {
			r.pauseLog.Log("err", err)
			sleep(ctx, time.Second)
			continue
		}
		if err == nil || ctx.Err() == nil { // a round that published is a resumption, even if ctx ended since
			r.pauseLog.End("outbox relay resumed")
		}
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, ErrLeaseLost):
			r.Logger.Warn("outbox relay lost its lease; another relay publishes", "holder", r.Config.Holder)
		case n == 0:
			if _, _, err := r.lease.valid(); err != nil {
				sleep(ctx, r.Config.LeaseTTL/3) // not the holder: try again later
			} else {
				sleep(ctx, r.Config.Interval)
			}
		}
	}
	return nil
}

// row is one outbox row in a round.
type row struct {
	id       int64
	rec      *kgo.Record
	failures int
	eventID  string
	// headersErr: the row's headers column does not decode (outbox.ErrHeaders); the row is set
	// aside as invalid_record without being sent, and parks its key like any set-aside row.
	headersErr error
}

// RunOnce publishes up to batch pending rows in id order and returns how many it published. A
// round reads the rows not set aside, not waiting to retry, not of a paused topic and not behind
// such a row of their (topic, record key); it publishes them in waves — the first row of every
// key, then the second, … — so a key's row is sent only once its previous row is acknowledged
// (acks=all, idempotent producer), and a row that fails stops its key for the round. Rows with a
// null key have no order to keep and all go in the first wave. Published rows are marked
// (deleted); failed ones are recorded by class (see Relay). It returns an error only when the
// database fails or every row of the round failed transiently (an outage: nothing is recorded on
// the rows).
func (r *Relay) RunOnce(ctx context.Context, batch int) (int, error) {
	token, ok, err := r.hold(ctx)
	if !ok {
		return 0, err
	}
	rows, err := r.read(ctx, batch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	th := kgo.RecordHeader{Key: TokenHeader, Value: []byte(strconv.FormatInt(token, 10))}
	for _, w := range rows {
		w.rec.Headers = append(w.rec.Headers, th)
	}
	published, failed := r.produce(ctx, rows)
	// The marks and failure records outlive a shutdown that ended ctx mid-round (otherwise the
	// next relay republishes the whole round), bounded so a dead database cannot hang it.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	// Marks first: a crash after the produce republishes, so the sooner the better.
	if token, ok, err = r.mark(wctx, published, token); !ok {
		return 0, err
	}
	if err := r.recordRound(ctx, wctx, token, len(published), failed); err != nil {
		return len(published), err
	}
	if r.Published != nil {
		r.Published(len(published))
	}
	return len(published), nil
}

// failure is a row the round did not publish, with its class and error.
type failure struct {
	row   *row
	class outbox.ErrorClass
	err   error
}

// hold re-asserts the lease when it is due and returns the token to publish under; ok false:
// this relay does not hold the lease (err: the database failed asserting it), and the round
// publishes nothing.
func (r *Relay) hold(ctx context.Context) (token int64, ok bool, err error) {
	r.init()
	if r.lease.due() {
		_, held, err := r.lease.assert(ctx)
		r.Metrics.Active.Set(b2f(held))
		if err != nil && !held {
			return 0, false, err
		}
		if !held {
			r.clearPauses()
			return 0, false, nil
		}
	}
	token, _, err = r.lease.valid()
	return token, err == nil, nil
}

// produce publishes rows in waves — the first row of every key, then the second, … — checking
// the lease before every produce, so a key's row is sent only once its previous row is
// acknowledged and a row that fails stops its key for the round. It pauses the topics that
// answered with a topic or authorization error and resumes those that took or refused a row
// for its own sake, and returns the ids acknowledged and the rows that failed.
func (r *Relay) produce(ctx context.Context, rows []*row) (published []int64, failed []failure) {
	stopped := map[string]bool{}  // topic + "\x00" + key of a row that failed this round
	pausing := map[string]error{} // topics that answered with a topic or authorization error
	reached := map[string]bool{}  // topics that published or refused a row for its own sake
	for _, wave := range waves(rows) {
		var send []*row
		for _, w := range wave {
			switch {
			case stopped[keyOf(w)] || r.isPaused(w.rec.Topic):
			case w.headersErr != nil:
				failed = append(failed, failure{w, outbox.ClassInvalidRecord, w.headersErr})
				if w.rec.Key != nil {
					stopped[keyOf(w)] = true
				}
			default:
				send = append(send, w)
			}
		}
		if len(send) == 0 {
			continue
		}
		// The lease is checked before every produce, and the produce ends before the lease would.
		_, left, err := r.lease.valid()
		if err != nil {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, left)
		recs := make([]*kgo.Record, len(send))
		byRec := make(map[*kgo.Record]*row, len(send))
		for i, w := range send {
			recs[i], byRec[w.rec] = w.rec, w
		}
		// Results come in completion order, not in the order sent. They are read even when ctx
		// ended meanwhile (a shutdown): what was acknowledged is marked below.
		results := r.Client.ProduceSync(pctx, recs...)
		for _, res := range results {
			w := byRec[res.Record]
			if res.Err == nil {
				published = append(published, w.id)
				reached[w.rec.Topic] = true
				continue
			}
			err, class := res.Err, Classify(res.Err)
			if class.SetsAside() && len(send) > 1 {
				// The broker refuses a whole record batch when the batch is too large for the
				// topic: try the row alone before blaming it (its key's later rows are not sent
				// before this returns, so order holds).
				if err = r.Client.ProduceSync(pctx, w.rec).FirstErr(); err == nil {
					published = append(published, w.id)
					reached[w.rec.Topic] = true
					continue
				}
				class = Classify(err)
			}
			failed = append(failed, failure{w, class, err})
			if w.rec.Key != nil {
				stopped[keyOf(w)] = true
			}
			if class == outbox.ClassTopic || class == outbox.ClassAuthorization {
				pausing[w.rec.Topic] = err
			} else {
				reached[w.rec.Topic] = true // the topic exists and takes writes: not paused
			}
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
	}
	for topic, err := range pausing { // once per round, however many rows of it failed
		r.pauseTopic(topic, err)
	}
	for topic := range reached {
		if _, bad := pausing[topic]; !bad {
			r.resumeTopic(topic)
		}
	}
	return published, failed
}

// mark deletes the published rows, fenced by token, and returns the token the round holds
// after it. ok false: the round stops there — the database failed (err), the lease was lost
// (ErrLeaseLost), or another relay held it in between (nil: the rows are published again under
// this relay's new lease) — with the rows left unmarked counted.
func (r *Relay) mark(wctx context.Context, published []int64, token int64) (int64, bool, error) {
	if r.testSignals.beforeMark != nil && len(published) > 0 {
		r.testSignals.beforeMark()
	}
	if len(published) == 0 {
		return token, true, nil
	}
	mark := func(token int64) (int64, error) {
		tag, err := r.Pool.Exec(wctx, stmts.SQL("outbox_delete_published"), published, token)
		return tag.RowsAffected(), err
	}
	n, err := mark(token)
	if err == nil && n == 0 {
		// The lease lapsed during the round (a produce blocked through a broker failover
		// outlasts it). If re-acquiring it gives exactly the next token, nobody held it in
		// between, so nobody published these rows again: mark them under the new token
		// instead of republishing them.
		next, held, _ := r.lease.assert(wctx)
		switch {
		case held && next == token+1:
			token = next
			n, err = mark(token)
		case held:
			// Someone held the lease in between and may have published these rows: they are
			// published again under the lease this relay holds now (counted below).
			r.Metrics.Unmarked.Add(float64(len(published)))
			return token, false, nil
		}
	}
	switch {
	case err != nil:
		r.Metrics.Unmarked.Add(float64(len(published)))
		return token, false, fmt.Errorf("outbox: mark published: %w", err)
	case n == 0:
		r.Metrics.Unmarked.Add(float64(len(published)))
		r.lease.lost()
		r.clearPauses()
		r.Metrics.Active.Set(0)
		return token, false, ErrLeaseLost
	}
	return token, true, nil
}

// recordRound counts and logs the round's failures and records them on their rows (set aside,
// or a retry with backoff), fenced by token; a topic's pause and a shutdown's failures record
// nothing. Every row of the round failing transiently is an outage of the broker, returned as
// such, with nothing recorded.
func (r *Relay) recordRound(ctx, wctx context.Context, token int64, published int, failed []failure) error {
	transient := 0
	var ids []int64
	var classes, errs []string
	var aside []bool
	var waits []time.Duration
	for _, f := range failed {
		r.Metrics.PublishFailures.WithLabelValues(f.row.rec.Topic, string(f.class)).Inc()
		switch {
		case f.class.SetsAside():
			r.Logger.Error("outbox row set aside: the broker refuses it; retry it after a fix or discard it (bookrecon outbox)",
				"outbox_id", f.row.id, "event_id", f.row.eventID, "topic", f.row.rec.Topic, "error_class", f.class, "err", f.err)
		case f.class == outbox.ClassTransient:
			transient++
			if ctx.Err() != nil {
				continue // failed because of the shutdown: nothing to record on the row
			}
			r.Logger.Error("outbox row failed to publish; retried with backoff", "outbox_id", f.row.id, "event_id", f.row.eventID,
				"topic", f.row.rec.Topic, "failures", f.row.failures+1, "err", f.err)
		default:
			continue // the topic is paused; nothing is recorded on the row
		}
		ids = append(ids, f.row.id)
		classes = append(classes, string(f.class))
		aside = append(aside, f.class.SetsAside())
		errs = append(errs, errorText(f.err))
		waits = append(waits, r.retryWait(f.row.failures+1))
	}
	if transient > 0 && published == 0 && transient == len(failed) && ctx.Err() == nil {
		// Every row of the round failed transiently: an outage of the broker, not of the rows.
		return fmt.Errorf("outbox: produce: %w", failed[0].err)
	}
	if len(ids) > 0 {
		return r.recordFailures(wctx, token, ids, classes, errs, aside, waits)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// roundRead is the round's read as one pipelined batch (one round trip, one transaction):
// outbox_round_plan, then query (outbox_select_round, or the EXPLAIN of it in this package's
// tests) with batch and the paused topics.
func roundRead(query string, batch int, paused []string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(stmts.SQL("outbox_round_plan"))
	b.Queue(query, batch, paused)
	return b
}

// read returns the round's rows (see RunOnce), read by the ordered scan outbox_round_plan pins.
func (r *Relay) read(ctx context.Context, batch int) ([]*row, error) {
	br := r.Pool.SendBatch(ctx, roundRead(stmts.SQL("outbox_select_round"), batch, r.pausedTopics()))
	defer func() { _ = br.Close() }() // the error paths; the read checks Close itself
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (*row, error) {
		var w row
		var topic string
		var key, value []byte
		var headers pgtype.DriverBytes // decoded here, into strings of their own: not kept
		if err := cr.Scan(&w.id, &topic, &key, &value, &headers, &w.failures, &w.eventID); err != nil {
			return nil, err
		}
		hs, err := outbox.DecodeHeaders(headers, w.eventID, key)
		if err != nil {
			w.headersErr = fmt.Errorf("row %d headers: %w", w.id, err)
		}
		w.rec = &kgo.Record{Topic: topic, Key: key, Value: value}
		if len(hs) > 0 {
			// The header values share one buffer (each capped at its end), allocated once.
			n := 0
			for _, h := range hs {
				n += len(h.Value)
			}
			buf := make([]byte, 0, n)
			w.rec.Headers = make([]kgo.RecordHeader, len(hs))
			for i, h := range hs {
				at := len(buf)
				buf = append(buf, h.Value...)
				w.rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: buf[at:len(buf):len(buf)]}
			}
		}
		return &w, nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	return out, nil
}

// recordFailures records failed rows (parallel slices): a row with aside set (a record class) is
// set aside, any other gets retry_at after its wait.
func (r *Relay) recordFailures(ctx context.Context, token int64, ids []int64, classes, errs []string, aside []bool, waits []time.Duration) error {
	ms := make([]int64, len(waits))
	for i, w := range waits {
		ms[i] = w.Milliseconds()
	}
	_, err := r.Pool.Exec(ctx, stmts.SQL("outbox_record_failures"), ids, classes, errs, aside, ms, token)
	if err != nil {
		return fmt.Errorf("outbox: record publish failures: %w", err)
	}
	return nil
}

// errorText is err as a row keeps it: valid UTF-8 without NUL bytes (which text columns refuse),
// at most 1,000 bytes.
func errorText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "?"), "\x00", "?")
	if len(s) > 1000 {
		s = strings.ToValidUTF8(s[:1000], "")
	}
	return s
}

// retryWait is the backoff before the n-th retry of a row: RetryInitial × 2^(n−1), at most
// RetryMax.
func (r *Relay) retryWait(n int) time.Duration {
	d := r.Config.RetryInitial
	for i := 1; i < n && d < r.Config.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.Config.RetryMax)
}

// waves groups rows for RunOnce: wave i holds the i-th row of every (topic, record key), in id
// order; rows with a null key are all in wave 0.
func waves(rows []*row) [][]*row {
	var out [][]*row
	seen := map[string]int{}
	for _, w := range rows {
		i := 0
		if w.rec.Key != nil {
			k := keyOf(w)
			i = seen[k]
			seen[k] = i + 1
		}
		if i == len(out) {
			out = append(out, nil)
		}
		out[i] = append(out[i], w)
	}
	return out
}

func keyOf(w *row) string { return w.rec.Topic + "\x00" + string(w.rec.Key) }

// pauseTopic pauses topic after a topic or authorization error, doubling its pause.
func (r *Relay) pauseTopic(topic string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, was := r.paused[topic]
	p.wait = min(max(2*p.wait, r.Config.TopicPause), time.Minute)
	p.until, p.err = time.Now().Add(p.wait), err.Error()
	r.paused[topic] = p
	r.Metrics.TopicPaused.WithLabelValues(topic).Set(1)
	if !was {
		r.Logger.Error("outbox topic paused: every row of it waits; check that the topic exists and the relay may write to it",
			"topic", topic, "err", err)
	}
}

// resumeTopic ends topic's pause: one of its rows was published, or refused for its own sake.
func (r *Relay) resumeTopic(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, was := r.paused[topic]; was {
		delete(r.paused, topic)
		r.Metrics.TopicPaused.WithLabelValues(topic).Set(0)
		r.Logger.Info("outbox topic resumed", "topic", topic)
	}
}

// clearPauses forgets every pause when the relay loses its lease: another relay publishes now,
// and this one's view of the topics is stale.
func (r *Relay) clearPauses() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.paused {
		delete(r.paused, t)
		r.Metrics.TopicPaused.WithLabelValues(t).Set(0)
	}
}

// isPaused reports whether topic is paused now.
func (r *Relay) isPaused(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.paused[topic]
	return ok && time.Now().Before(p.until)
}

// pausedTopics lists the topics paused now (a topic whose pause ended is tried again; it stays
// listed by Ready until one of its rows is published).
func (r *Relay) pausedTopics() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	now := time.Now()
	for t, p := range r.paused {
		if now.Before(p.until) {
			out = append(out, t)
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
