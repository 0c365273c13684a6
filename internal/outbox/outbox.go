// Package outbox is the transactional outbox: Insert writes a record to publish in the caller's
// transaction, beside the state change that caused it; Relay publishes unpublished rows in id
// order to Kafka and marks them published. One relay is active per service, elected with a
// PostgreSQL advisory lock (DESIGN.md "Shape"). Delivery is at-least-once: a crash between the
// produce and the mark republishes the same record, which carries the same deterministic
// eventId, so consumers deduplicate it.
package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header is one Kafka record header.
type Header struct {
	Key   string `json:"k"`
	Value string `json:"v"`
}

// Message is one record to publish.
type Message struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	EventID string // the record's eventId (or the dead letter's source position)
}

// Insert writes m into the outbox inside tx; a second row for the same (topic, eventId) is a
// no-op, so re-deriving a fact never publishes it twice.
func Insert(ctx context.Context, tx pgx.Tx, m Message) error {
	h, err := json.Marshal(m.Headers)
	if err != nil {
		return fmt.Errorf("outbox: headers: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (topic, record_key, value, headers, event_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (topic, event_id) DO NOTHING`,
		m.Topic, m.Key, m.Value, h, m.EventID)
	if err != nil {
		return fmt.Errorf("outbox: insert %s %s: %w", m.Topic, m.EventID, err)
	}
	return nil
}

// InsertMany writes msgs into the outbox inside tx in one statement, in order (ids ascend in
// slice order); (topic, eventId) repeats are no-ops as in Insert.
func InsertMany(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	topics := make([]string, len(msgs))
	keys := make([][]byte, len(msgs))
	values := make([][]byte, len(msgs))
	headers := make([]string, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		h, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outbox: headers: %w", err)
		}
		topics[i], keys[i], values[i], headers[i], ids[i] = m.Topic, m.Key, m.Value, string(h), m.EventID
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (topic, record_key, value, headers, event_id)
		SELECT t, k, v, h::jsonb, e FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[])
			WITH ORDINALITY AS u(t, k, v, h, e, n) ORDER BY n
		ON CONFLICT (topic, event_id) DO NOTHING`, topics, keys, values, headers, ids)
	if err != nil {
		return fmt.Errorf("outbox: insert %d rows: %w", len(msgs), err)
	}
	return nil
}

// CloudEvent builds the CloudEvents 1.0 binary-mode headers (Kafka protocol binding) of a JSON
// record: ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_subject, ce_partitionkey and
// content-type.
func CloudEvent(id, source, typ, subject, partitionKey string, at time.Time) []Header {
	return []Header{
		{"ce_specversion", "1.0"},
		{"ce_id", id},
		{"ce_source", source},
		{"ce_type", typ},
		{"ce_time", at.UTC().Format(time.RFC3339Nano)},
		{"ce_subject", subject},
		{"ce_partitionkey", partitionKey},
		{"content-type", "application/json"},
	}
}

// RelayConfig configures a Relay. Zero values take the documented defaults.
type RelayConfig struct {
	// LockKey is the advisory lock that elects one active relay per service.
	LockKey int64
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

func (c RelayConfig) withDefaults() RelayConfig {
	c.Batch = cmp.Or(c.Batch, 500)
	c.Interval = cmp.Or(c.Interval, 100*time.Millisecond)
	c.RetryInitial = cmp.Or(c.RetryInitial, 200*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 30*time.Second)
	c.TopicPause = cmp.Or(c.TopicPause, time.Second)
	return c
}

// ErrorClass classifies a failed publish of one row (the error_class label and column).
type ErrorClass string

// Error classes. The record classes set the row aside; ClassTopic and ClassAuthorization pause
// the row's topic; ClassTransient retries the row with backoff.
const (
	ClassRecordTooLarge     ErrorClass = "record_too_large"      // MESSAGE_TOO_LARGE, or larger than the client's batch limit
	ClassRecordListTooLarge ErrorClass = "record_list_too_large" // RECORD_LIST_TOO_LARGE
	ClassInvalidRecord      ErrorClass = "invalid_record"        // INVALID_RECORD, INVALID_TIMESTAMP, CORRUPT_MESSAGE
	ClassTopic              ErrorClass = "topic"                 // the topic does not exist or its name is invalid
	ClassAuthorization      ErrorClass = "authorization"         // topic or cluster authorization failed
	ClassTransient          ErrorClass = "transient"             // anything else: retried
)

// ErrorClasses lists every ErrorClass (metric pre-creation).
func ErrorClasses() []ErrorClass {
	return []ErrorClass{ClassRecordTooLarge, ClassRecordListTooLarge, ClassInvalidRecord, ClassTopic, ClassAuthorization, ClassTransient}
}

// Classify returns the class of a produce error: record errors are the record's own (the broker
// refuses it whatever happens around it), topic and authorization errors hit every row of the
// topic, and everything else is transient. It classifies by franz-go's typed errors, never by
// message text.
func Classify(err error) ErrorClass {
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		return ClassRecordTooLarge
	case errors.Is(err, kerr.RecordListTooLarge):
		return ClassRecordListTooLarge
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidTimestamp), errors.Is(err, kerr.CorruptMessage):
		return ClassInvalidRecord
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidTopicException):
		return ClassTopic
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return ClassAuthorization
	}
	return ClassTransient
}

// SetsAside reports whether a row that failed with c is set aside (a record error).
func (c ErrorClass) SetsAside() bool {
	return c == ClassRecordTooLarge || c == ClassRecordListTooLarge || c == ClassInvalidRecord
}

// RelayMetrics are the relay's series.
type RelayMetrics struct {
	// PublishFailures counts failed publishes of a row by topic and error class
	// (bookrecon_outbox_publish_failures_total); a record class means the row was set aside.
	PublishFailures *prometheus.CounterVec
	// TopicPaused is 1 while a topic is paused by a topic or authorization error
	// (bookrecon_outbox_topic_paused).
	TopicPaused *prometheus.GaugeVec
}

// NewRelayMetrics registers the relay's series on reg (nil: not registered), pre-creating those
// of topics.
func NewRelayMetrics(reg prometheus.Registerer, topics []string) *RelayMetrics {
	m := &RelayMetrics{
		PublishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_outbox_publish_failures_total",
			Help: "Outbox rows whose publish failed, by topic and error class; record classes (record_too_large, record_list_too_large, invalid_record) set the row aside."},
			[]string{"topic", "error_class"}),
		TopicPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bookrecon_outbox_topic_paused",
			Help: "1 while the relay has paused a topic after a topic or authorization error, else 0."}, []string{"topic"}),
	}
	if reg != nil {
		reg.MustRegister(m.PublishFailures, m.TopicPaused)
	}
	for _, t := range topics {
		m.TopicPaused.WithLabelValues(t)
		for _, c := range ErrorClasses() {
			m.PublishFailures.WithLabelValues(t, string(c))
		}
	}
	return m
}

// Relay publishes outbox rows in id order, in order per (topic, record key), and isolates what it
// cannot publish: a row the broker refuses for its own sake is set aside with its error (kept,
// listed by SetAside, released by Retry or Discard) and parks its (topic, record key) — the key's
// later rows wait, every other key flows; a topic or authorization error pauses that topic
// (readiness false, TopicPaused); a transient failure of some rows retries them with backoff
// (retry_at, also parking their keys); a failure of every row is an outage that pauses the round.
// Rows published are marked one by one, so one failure never republishes the others.
type Relay struct {
	Pool    *pgxpool.Pool
	Client  *kgo.Client
	Config  RelayConfig
	Logger  *slog.Logger
	Metrics *RelayMetrics // nil: a set of its own, unregistered
	// Published, when set, is called with the number of records of each round.
	Published func(n int)

	once   sync.Once
	mu     sync.Mutex
	paused map[string]topicPause
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
			r.Metrics = NewRelayMetrics(nil, r.Config.Topics)
		}
		if r.Logger == nil {
			r.Logger = slog.Default()
		}
		r.paused = map[string]topicPause{}
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

// Run publishes until ctx ends. It holds the advisory lock on a dedicated connection while
// active; a relay that cannot take the lock retries every second.
func (r *Relay) Run(ctx context.Context) error {
	r.init()
	for ctx.Err() == nil {
		err := r.runLocked(ctx)
		if err != nil && ctx.Err() == nil {
			r.Logger.Warn("outbox relay paused", "err", err)
		}
		sleep(ctx, time.Second)
	}
	return nil
}

func (r *Relay) runLocked(ctx context.Context) error {
	conn, err := r.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.Config.LockKey).Scan(&got); err != nil {
		return err
	}
	if !got {
		return nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, r.Config.LockKey)
	}()
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx, r.Config.Batch)
		if err != nil {
			return err
		}
		if n == 0 {
			sleep(ctx, r.Config.Interval)
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
}

// RunOnce publishes up to batch pending rows in id order and returns how many it published. A
// round reads the rows not set aside, not waiting to retry, not of a paused topic and not behind
// such a row of their (topic, record key); it publishes them in waves — the first row of every
// key, then the second, … — so a key's row is sent only once its previous row is acknowledged
// (acks=all, idempotent producer), and a row that fails stops its key for the round. Rows with a
// null key have no order to keep and all go in the first wave. Published rows are marked; failed
// ones are recorded by class (see Relay). It returns an error only when the database fails or
// every row of the round failed transiently (an outage: nothing is recorded on the rows).
func (r *Relay) RunOnce(ctx context.Context, batch int) (int, error) {
	r.init()
	rows, err := r.read(ctx, batch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	var published []int64
	type failure struct {
		row   *row
		class ErrorClass
		err   error
	}
	var failed []failure
	stopped := map[string]bool{} // topic + "\x00" + key of a row that failed this round
	for _, wave := range waves(rows) {
		var send []*row
		for _, w := range wave {
			if !stopped[keyOf(w)] && !r.isPaused(w.rec.Topic) {
				send = append(send, w)
			}
		}
		if len(send) == 0 {
			continue
		}
		recs := make([]*kgo.Record, len(send))
		byRec := make(map[*kgo.Record]*row, len(send))
		for i, w := range send {
			recs[i], byRec[w.rec] = w.rec, w
		}
		// Results come in completion order, not in the order sent.
		results := r.Client.ProduceSync(ctx, recs...)
		if ctx.Err() != nil {
			break
		}
		for _, res := range results {
			w := byRec[res.Record]
			if res.Err == nil {
				published = append(published, w.id)
				continue
			}
			err, class := res.Err, Classify(res.Err)
			if class.SetsAside() && len(send) > 1 {
				// The broker refuses a whole record batch when the batch is too large for the
				// topic: try the row alone before blaming it (its key's later rows are not sent
				// before this returns, so order holds).
				if err = r.Client.ProduceSync(ctx, w.rec).FirstErr(); err == nil {
					published = append(published, w.id)
					continue
				}
				class = Classify(err)
			}
			failed = append(failed, failure{w, class, err})
			if w.rec.Key != nil {
				stopped[keyOf(w)] = true
			}
			if class == ClassTopic || class == ClassAuthorization {
				r.pauseTopic(w.rec.Topic, err)
			}
		}
	}
	// Marks first: a crash after the produce republishes, so the sooner the better.
	if len(published) > 0 {
		if _, err := r.Pool.Exec(ctx, `UPDATE outbox SET published_at = now(), retry_at = NULL WHERE id = ANY($1)`, published); err != nil {
			return 0, fmt.Errorf("outbox: mark published: %w", err)
		}
		r.resumeTopics(rows, published)
	}
	transient := 0
	var ids []int64
	var classes, errs []string
	var waits []time.Duration
	for _, f := range failed {
		r.Metrics.PublishFailures.WithLabelValues(f.row.rec.Topic, string(f.class)).Inc()
		switch {
		case f.class.SetsAside():
			r.Logger.Error("outbox row set aside: the broker refuses it; retry it after a fix or discard it (bookrecon outbox)",
				"outbox_id", f.row.id, "event_id", f.row.eventID, "topic", f.row.rec.Topic, "error_class", f.class, "err", f.err)
		case f.class == ClassTransient:
			transient++
			r.Logger.Error("outbox row failed to publish; retried with backoff", "outbox_id", f.row.id, "event_id", f.row.eventID,
				"topic", f.row.rec.Topic, "failures", f.row.failures+1, "err", f.err)
		default:
			continue // the topic is paused; nothing is recorded on the row
		}
		ids = append(ids, f.row.id)
		classes = append(classes, string(f.class))
		errs = append(errs, errorText(f.err))
		waits = append(waits, r.retryWait(f.row.failures+1))
	}
	if transient > 0 && len(published) == 0 && transient == len(failed) {
		// Every row of the round failed transiently: an outage of the broker, not of the rows.
		return 0, fmt.Errorf("outbox: produce: %w", failed[0].err)
	}
	if len(ids) > 0 {
		if err := r.recordFailures(ctx, ids, classes, errs, waits); err != nil {
			return len(published), err
		}
	}
	if r.Published != nil {
		r.Published(len(published))
	}
	return len(published), nil
}

// read returns the round's rows (see RunOnce).
func (r *Relay) read(ctx context.Context, batch int) ([]*row, error) {
	rows, err := r.Pool.Query(ctx, `SELECT id, topic, record_key, value, headers, publish_failures, event_id FROM outbox o
		WHERE published_at IS NULL AND discarded_at IS NULL AND set_aside_at IS NULL
			AND (retry_at IS NULL OR retry_at <= now())
			AND NOT (topic = ANY($2::text[]))
			AND NOT EXISTS (SELECT 1 FROM outbox p
				WHERE p.topic = o.topic AND p.record_key = o.record_key AND p.id < o.id
					AND p.published_at IS NULL AND p.discarded_at IS NULL
					AND (p.set_aside_at IS NOT NULL OR p.retry_at IS NOT NULL) AND (p.set_aside_at IS NOT NULL OR p.retry_at > now()))
		ORDER BY id LIMIT $1`, batch, r.pausedTopics())
	if err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (*row, error) {
		var w row
		var topic string
		var key, value, headers []byte
		if err := cr.Scan(&w.id, &topic, &key, &value, &headers, &w.failures, &w.eventID); err != nil {
			return nil, err
		}
		var hs []Header
		if err := json.Unmarshal(headers, &hs); err != nil {
			return nil, fmt.Errorf("row %d headers: %w", w.id, err)
		}
		w.rec = &kgo.Record{Topic: topic, Key: key, Value: value}
		for _, h := range hs {
			w.rec.Headers = append(w.rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
		return &w, nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	return out, nil
}

// recordFailures records failed rows: a record class sets the row aside, a transient one sets
// retry_at after its wait.
func (r *Relay) recordFailures(ctx context.Context, ids []int64, classes, errs []string, waits []time.Duration) error {
	ms := make([]int64, len(waits))
	for i, w := range waits {
		ms[i] = w.Milliseconds()
	}
	_, err := r.Pool.Exec(ctx, `UPDATE outbox o SET publish_failures = o.publish_failures + 1, error_class = f.class, last_error = f.err,
			set_aside_at = CASE WHEN f.class = 'transient' THEN NULL ELSE now() END,
			retry_at = CASE WHEN f.class = 'transient' THEN now() + f.ms * interval '1 millisecond' END
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS f(id, class, err, ms)
		WHERE o.id = f.id`, ids, classes, errs, ms)
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

// resumeTopics ends the pause of every topic that had a row published.
func (r *Relay) resumeTopics(rows []*row, published []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.paused) == 0 {
		return
	}
	ok := map[int64]bool{}
	for _, id := range published {
		ok[id] = true
	}
	for _, w := range rows {
		if _, was := r.paused[w.rec.Topic]; was && ok[w.id] {
			delete(r.paused, w.rec.Topic)
			r.Metrics.TopicPaused.WithLabelValues(w.rec.Topic).Set(0)
			r.Logger.Info("outbox topic resumed", "topic", w.rec.Topic)
		}
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

// SetAsideRow is an outbox row the relay set aside (see Relay), as SetAside lists it.
type SetAsideRow struct {
	ID         int64
	Topic      string
	EventID    string
	Bytes      int // size of key, value and headers
	Failures   int
	ErrorClass ErrorClass
	LastError  string
	SetAsideAt time.Time
}

// SetAside lists up to limit set-aside rows, oldest first.
func SetAside(ctx context.Context, db Querier, limit int) ([]SetAsideRow, error) {
	rows, err := db.Query(ctx, `SELECT id, topic, event_id, coalesce(length(record_key), 0) + coalesce(length(value), 0) + length(headers::text),
			publish_failures, error_class, coalesce(last_error, ''), set_aside_at
		FROM outbox WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: set aside: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SetAsideRow, error) {
		var x SetAsideRow
		return x, r.Scan(&x.ID, &x.Topic, &x.EventID, &x.Bytes, &x.Failures, &x.ErrorClass, &x.LastError, &x.SetAsideAt)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: set aside: %w", err)
	}
	return out, nil
}

// ErrNotSetAside: Retry or Discard named a row that is not set aside (unknown, published or
// discarded already).
var ErrNotSetAside = errors.New("outbox: no such set-aside row")

// Retry releases a set-aside row after its cause was fixed (the topic's max.message.bytes raised,
// for instance): the relay publishes it on its next round, then the rows its key held back. It
// returns ErrNotSetAside when id is not set aside.
func Retry(ctx context.Context, db Querier, id int64) error {
	tag, err := db.Exec(ctx, `UPDATE outbox SET set_aside_at = NULL, retry_at = NULL
		WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("outbox: retry %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d", ErrNotSetAside, id)
	}
	return nil
}

// Discard gives up a set-aside row for good, with the operator's reason (required, kept on the
// row): it is never published, and its key's later rows flow again. It returns ErrNotSetAside
// when id is not set aside.
func Discard(ctx context.Context, db Querier, id int64, reason string) error {
	if reason == "" {
		return errors.New("outbox: discard needs a reason")
	}
	tag, err := db.Exec(ctx, `UPDATE outbox SET discarded_at = now(), discard_reason = $2
		WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`, id, reason)
	if err != nil {
		return fmt.Errorf("outbox: discard %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d", ErrNotSetAside, id)
	}
	return nil
}

// Querier is what SetAside, Retry and Discard need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// CountSetAside returns the number of set-aside rows, for the bookrecon_outbox_set_aside_records
// gauge.
func CountSetAside(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox
		WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("outbox: count set aside: %w", err)
	}
	return n, nil
}

// Backlog returns the number of unpublished rows and the age of the oldest, for the
// bookrecon_outbox_backlog metrics.
func Backlog(ctx context.Context, pool *pgxpool.Pool) (int64, time.Duration, error) {
	var n int64
	var age *float64
	err := pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
		FROM outbox WHERE published_at IS NULL AND discarded_at IS NULL`).Scan(&n, &age)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	if age == nil {
		return n, 0, nil
	}
	return n, time.Duration(*age * float64(time.Second)), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// LockKey is the advisory lock of the outbox relay. Every service runs a relay, but all share
// this key, so exactly one relay publishes at a time and rows keep their id order.
const LockKey int64 = 0x626b7201
