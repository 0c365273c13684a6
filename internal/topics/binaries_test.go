package topics_test

// Every binary and command that names a topic takes it from topics.Flags: these tests build the
// binaries and run them with BOOKRECON_TOPIC_SUFFIX, as a suffix-isolated deployment does.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// TestBadSuffixIsAUsageError: every binary and command that names topics refuses a suffix Kafka
// would refuse in a topic name, or one too long for it, at parse time with exit status 80 —
// before it connects to anything (the database and broker addresses lead nowhere).
func TestBadSuffixIsAUsageError(t *testing.T) {
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "ingester", "reconciler", "escalator", "bookrecon")
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(file, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nowhere := []string{"BOOKRECON_DATABASE_URL=postgres://nobody@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=1",
		"BOOKRECON_KAFKA_BROKERS=127.0.0.1:1", "BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_PROVIDER_URL=http://127.0.0.1:1",
		"BOOKRECON_INGESTER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_RECONCILER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_ESCALATOR_ADMIN_ADDR=127.0.0.1:0"}
	const illegal = `topic suffix "run/1": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed in a topic name`
	long := strings.Repeat("x", topics.MaxSuffixLength+1)
	const tooLong = "topic suffix: 218 characters, at most 217 (a topic name has at most 249)"
	for _, c := range []struct {
		bin    string
		args   []string
		suffix string
		want   string // the error line on stderr
	}{
		{"ingester", nil, "run/1", "ingester: error: " + illegal},
		{"ingester", nil, long, "ingester: error: " + tooLong},
		{"reconciler", nil, "run/1", "reconciler: error: " + illegal},
		{"escalator", nil, "run/1", "escalator: error: " + illegal},
		{"escalator", nil, long, "escalator: error: " + tooLong},
		{"bookrecon", []string{"topics"}, "run/1", "bookrecon: error: topics: " + illegal},
		{"bookrecon", []string{"topics"}, long, "bookrecon: error: topics: " + tooLong},
		{"bookrecon", []string{"publish", file}, "run/1", "bookrecon: error: publish: " + illegal},
		{"bookrecon", []string{"demo"}, "run/1", "bookrecon: error: demo: " + illegal},
		{"bookrecon", []string{"loadgen", "--out", t.TempDir()}, "run/1", "bookrecon: error: loadgen: " + illegal},
		{"bookrecon", []string{"check", "--input", t.TempDir()}, "run/1", "bookrecon: error: check: " + illegal},
		{"bookrecon", []string{"decide", "--tenant", "t_1", "--intent", "bi_1", "--key", "book:bi_1:v1", "--decision", "FAILED",
			"--actor", "ops.agent.07", "--reason", "checked"}, "run/1", "bookrecon: error: decide: " + illegal},
	} {
		name := c.bin
		if len(c.args) > 0 {
			name += "_" + c.args[0]
		}
		t.Run(fmt.Sprintf("%s_%d", name, len(c.suffix)), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := pipelinetest.RunBinary(t, 20*time.Second, filepath.Join(dir, c.bin), append(nowhere, "BOOKRECON_TOPIC_SUFFIX="+c.suffix), c.args...)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != 80 || lines[len(lines)-1] != c.want {
				t.Errorf("exit %d, last stderr line %q; want exit 80 and %q", code, lines[len(lines)-1], c.want)
			}
		})
	}
}

// v1State is what the broker holds of the v1 topics: end offset per topic/partition, absent
// topics left out.
func v1State(t *testing.T, adm *kadm.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics.Default().All()...)
	if err != nil {
		t.Fatalf("v1 end offsets: %v", err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	return out
}

// v1Records returns the records the v1 topics gained since before (a v1State) that mention
// marker: what this test, and nobody else sharing the broker, wrote to them.
func v1Records(t *testing.T, adm *kadm.Client, before map[string]int64, marker string) []string {
	t.Helper()
	after := v1State(t, adm)
	from := map[string]map[int32]kgo.Offset{}
	todo := 0
	for tp, end := range after {
		topic, p := splitTP(t, tp)
		if start := before[tp]; end > start {
			if from[topic] == nil {
				from[topic] = map[int32]kgo.Offset{}
			}
			from[topic][p] = kgo.NewOffset().At(start)
			todo += int(end - start)
		}
	}
	if todo == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.ConsumePartitions(from))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var found []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got < todo && ctx.Err() == nil; {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got++
			if bytes.Contains(r.Value, []byte(marker)) {
				found = append(found, fmt.Sprintf("%s/%d/%d %s", r.Topic, r.Partition, r.Offset, r.Value))
			}
		})
	}
	return found
}

// splitTP splits a v1State key, topic/partition.
func splitTP(t *testing.T, tp string) (string, int32) {
	t.Helper()
	i := strings.LastIndexByte(tp, '/')
	p, err := strconv.ParseInt(tp[i+1:], 10, 32)
	if err != nil {
		t.Fatalf("v1State key %q: %v", tp, err)
	}
	return tp[:i], int32(p)
}

// endSum returns the sum of topic's end offsets: the records written to it.
func endSum(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Errorf("%s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		n += o.Offset
	})
	return n
}

// TestSuffixCommands runs `bookrecon topics`, `publish`, `decide` and `loadgen --publish` with
// BOOKRECON_TOPIC_SUFFIX: topics creates exactly the six suffixed topics, the others write to
// the suffixed attempts and decisions topics, and the v1 topics gain nothing.
func TestSuffixCommands(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(pipelinetest.BuildBinaries(t, "bookrecon"), "bookrecon")
	sfx := kafkatest.Suffix()
	want := topics.FromSuffix(sfx)
	adm := kafkatest.Admin(t)
	before := v1State(t, adm)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, want.All()...)
	})
	// decide looks the attempt up in a database of its own, migrated: never the environment's
	// default database, which a fresh machine has not migrated.
	env := []string{"BOOKRECON_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(), ","), "BOOKRECON_TOPIC_SUFFIX=" + sfx,
		"BOOKRECON_DATABASE_URL=" + pgtest.NewURL(t)}
	const bound = 60 * time.Second

	stdout, stderr, code := pipelinetest.RunBinary(t, bound, bin, env, "topics")
	var wantOut string
	for _, n := range want.All() {
		wantOut += fmt.Sprintf("topic %s (6 partitions)\n", n)
	}
	if code != 0 || stdout != wantOut {
		t.Fatalf("bookrecon topics: exit %d, stdout (-want +got):\n%s\nstderr: %s", code, cmp.Diff(wantOut, stdout), stderr)
	}
	wantTopics := map[string]int{}
	for _, n := range want.All() {
		wantTopics[n] = topics.Partitions
	}
	var got map[string]int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) { // metadata propagates
		listed, err := adm.ListTopics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, d := range listed.Sorted() {
			if strings.Contains(d.Topic, sfx) {
				got[d.Topic] = len(d.Partitions)
			}
		}
		if cmp.Equal(wantTopics, got) || time.Now().After(deadline) {
			break
		}
	}
	if diff := cmp.Diff(wantTopics, got); diff != "" {
		t.Errorf("topics on the broker named with the suffix (-want +got):\n%s", diff)
	}

	tenant := "t_sfx_" + sfx
	in := filepath.Join(t.TempDir(), "attempts.jsonl")
	var lines []byte
	for i := range 2 {
		b, err := json.Marshal(events.Attempt{SpecVersion: 1, EventID: fmt.Sprintf("evt-%s-%d", sfx, i), EventType: events.EventStarted,
			OccurredAt: time.Now().UTC(), TenantID: tenant, BookingIntentID: fmt.Sprintf("bi_%d", i), Operation: events.OpPaymentCapture,
			OperationVersion: 1, IdempotencyKey: fmt.Sprintf("capture:bi_%d:v1", i), Provider: "sim-pay",
			Request: &events.Request{OfferVersion: "off_1:1", TravellerRef: "tr_1", Amount: &events.Amount{Value: "10.00", Currency: "EUR"}}})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(in, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = pipelinetest.RunBinary(t, bound, bin, env, "publish", "--no-rebase", in)
	if wantOut := "published 2 records to " + want.Attempts + " (occurredAt shifted by 0s)\n"; code != 0 || stdout != wantOut {
		t.Errorf("bookrecon publish: exit %d, stdout %q, want %q; stderr: %s", code, stdout, wantOut, stderr)
	}

	stdout, stderr, code = pipelinetest.RunBinary(t, bound, bin, env, "decide", "--pending", "--tenant", tenant, "--intent", "bi_0", "--key", "capture:bi_0:v1",
		"--decision", "FAILED", "--actor", "ops.agent.07", "--reason", "checked at the provider", "--json")
	var dec struct {
		Topic     string
		Published bool
	}
	if err := json.Unmarshal([]byte(stdout), &dec); code != 0 || err != nil || dec.Topic != want.Decisions || !dec.Published {
		t.Errorf("bookrecon decide: exit %d, %+v (%v), want published to %s; stderr: %s", code, dec, err, want.Decisions, stderr)
	}

	out := t.TempDir()
	stdout, stderr, code = pipelinetest.RunBinary(t, bound, bin, env, "loadgen", "--out", out, "--intents", "3", "--redeliveries", "0", "--publish")
	gen, err := os.ReadFile(filepath.Join(out, "attempts.jsonl"))
	if code != 0 || err != nil {
		t.Fatalf("bookrecon loadgen: exit %d (%v), stdout %s, stderr %s", code, err, stdout, stderr)
	}
	generated := bytes.Count(gen, []byte("\n"))

	if n := endSum(t, adm, want.Attempts); n != int64(2+generated) {
		t.Errorf("%s holds %d records, want 2 published + %d generated", want.Attempts, n, generated)
	}
	if n := endSum(t, adm, want.Decisions); n != 1 {
		t.Errorf("%s holds %d records, want the 1 decision", want.Decisions, n)
	}
	for _, n := range []string{want.AttemptsDLQ, want.DecisionsDLQ, want.Resolutions, want.Escalations} {
		if got := endSum(t, adm, n); got != 0 {
			t.Errorf("%s holds %d records, want 0", n, got)
		}
	}
	after := v1State(t, adm)
	for tp := range after {
		if _, ok := before[tp]; !ok {
			t.Errorf("v1 partition %s appeared during the test", tp)
		}
	}
	if recs := v1Records(t, adm, before, sfx); len(recs) != 0 {
		t.Errorf("the v1 topics received this test's records:\n%s", strings.Join(recs, "\n"))
	}
}

// capabilityMap is the services test's map: sim-hotels settles by client reference at once;
// sim-slow never finds anything (eventual, no authoritative not-found) and escalates after 2s.
const capabilityMap = `providers:
  sim-hotels:
    lookups: [client_reference]
    consistency: strong
    consistencyWindow: 0s
    authoritativeNotFound: true
    nativeIdempotency: false
    maxProcessingTime: 1s
    deadline: 1h
    maxVersions: 3
  sim-slow:
    lookups: [client_reference]
    consistency: eventual
    consistencyWindow: 1h
    authoritativeNotFound: false
    nativeIdempotency: false
    maxProcessingTime: 1s
    deadline: 2s
    maxVersions: 3
`

// proc is a service binary running until the test ends.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) log() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

func start(t *testing.T, bin string, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), p.log())
		}
	})
	return p
}

// TestSuffixServices runs the ingester, reconciler and escalator binaries with
// BOOKRECON_TOPIC_SUFFIX on a suffixed pipeline: the reconciler's resolution (a lookup
// settles an attempt) and escalation (ambiguous_match: two records for one client reference)
// and the escalator's deadline_exceeded land on the suffixed topics — the outbox names them,
// the broker holds exactly those records — and the v1 topics receive nothing.
func TestSuffixServices(t *testing.T) {
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "ingester", "reconciler", "escalator")
	h := pipelinetest.New(t, 3)
	adm := kafkatest.Admin(t)
	before := v1State(t, adm)

	mp := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(mp, []byte(capabilityMap), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := providers.LoadMap(mp)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	created := now.Format(time.RFC3339Nano)
	truth, err := simulator.ParseTruth([]byte(`{"sim-hotels": [
		{"providerReference": "HTL-1", "clientReference": "cr_conf", "status": "CONFIRMED", "createdAt": "` + created + `"},
		{"providerReference": "HTL-2", "clientReference": "cr_amb", "status": "CONFIRMED", "createdAt": "` + created + `"},
		{"providerReference": "HTL-3", "clientReference": "cr_amb", "status": "CONFIRMED", "createdAt": "` + created + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sim := httptest.NewServer(simulator.New(simulator.Config{Truth: truth, Map: m}))
	t.Cleanup(sim.Close)

	env := []string{"BOOKRECON_DATABASE_URL=" + h.DBURL, "BOOKRECON_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(), ","),
		"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_TOPIC_SUFFIX=" + h.Suffix, "BOOKRECON_INGESTER_GROUP=" + h.Group,
		"BOOKRECON_INGESTER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_RECONCILER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_ESCALATOR_ADMIN_ADDR=127.0.0.1:0",
		"BOOKRECON_PROVIDER_URL=" + sim.URL, "BOOKRECON_BACKOFF_NO_JITTER=true"}
	for _, b := range []string{"ingester", "reconciler", "escalator"} {
		start(t, filepath.Join(dir, b), env...)
	}

	tenant := "t_sfx_" + h.Suffix
	var recs []*kgo.Record
	for i, c := range []struct{ intent, provider, cr string }{{"bi_conf", "sim-hotels", "cr_conf"}, {"bi_amb", "sim-hotels", "cr_amb"}, {"bi_slow", "sim-slow", "cr_slow"}} {
		base := events.Attempt{SpecVersion: 1, TenantID: tenant, BookingIntentID: c.intent, Operation: events.OpBook, OperationVersion: 1,
			IdempotencyKey: "book:" + c.intent + ":v1", Provider: c.provider}
		s, u := base, base
		s.EventID, s.EventType, s.OccurredAt = fmt.Sprintf("evt-%d-s", i), events.EventStarted, now
		s.Request = &events.Request{OfferVersion: "off_1:1", TravellerRef: "tr_1", Amount: &events.Amount{Value: "100.00", Currency: "EUR"},
			Stay: &events.Stay{PropertyID: "h_1", CheckIn: "2027-02-03", CheckOut: "2027-02-06"}}
		s.Recovery = events.Recovery{ClientReference: c.cr}
		u.EventID, u.EventType, u.OccurredAt = fmt.Sprintf("evt-%d-u", i), events.EventOutcomeUnknown, now.Add(time.Millisecond)
		u.Outcome = &events.Outcome{TimeoutClass: events.TimeoutRead}
		for _, e := range []events.Attempt{s, u} {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := events.DecodeAttempt(b, events.DecodeOptions{KnownProvider: m.Known}); err != nil {
				t.Fatalf("invalid test event: %v\n%s", err, b)
			}
			recs = append(recs, &kgo.Record{Topic: h.Topics.Attempts, Key: []byte(c.intent), Value: b})
		}
	}
	if err := h.Producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The outbox: exactly one resolution and two escalations, on the suffixed topics (facts:
	// a published row leaves the outbox; what each says is checked on the broker below).
	h.WaitFor("three outbox facts", 90*time.Second, func() bool { return h.Scalar(`SELECT count(*) FROM outbox_fact`) >= 3 })
	time.Sleep(time.Second)
	wantOut := []string{
		h.Topics.Escalations + " escalation.opened book:bi_amb:v1 ambiguous_match",
		h.Topics.Escalations + " escalation.opened book:bi_slow:v1 deadline_exceeded",
		h.Topics.Resolutions + " attempt.resolved book:bi_conf:v1 CONFIRMED",
	}
	describe := func(topic string, v []byte) string {
		var o struct{ EventType, IdempotencyKey, Reason, Status string }
		if err := json.Unmarshal(v, &o); err != nil {
			return fmt.Sprintf("%s %q", topic, v)
		}
		return strings.Join([]string{topic, o.EventType, o.IdempotencyKey, o.Reason + o.Status}, " ")
	}
	rows, err := h.Pool.Query(context.Background(), `SELECT topic FROM outbox_fact`)
	if err != nil {
		t.Fatal(err)
	}
	gotFacts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(gotFacts)
	if diff := cmp.Diff([]string{h.Topics.Escalations, h.Topics.Escalations, h.Topics.Resolutions}, gotFacts); diff != "" {
		t.Fatalf("outbox facts by topic (-want +got):\n%s", diff)
	}

	// The broker: the same records on the suffixed topics, nothing on the v1 topics.
	h.WaitFor("the outbox drained", 60*time.Second, h.OutboxDrained)
	var gotPub []string
	for _, c := range []struct {
		topic string
		n     int
	}{{h.Topics.Resolutions, 1}, {h.Topics.Escalations, 2}} {
		for _, r := range kafkatest.ReadAll(t, c.topic, c.n, 2*time.Second, 30*time.Second) {
			gotPub = append(gotPub, describe(r.Topic, r.Value))
		}
	}
	slices.Sort(gotPub)
	if diff := cmp.Diff(wantOut, gotPub); diff != "" {
		t.Errorf("records on the suffixed output topics (-want +got):\n%s", diff)
	}
	if recs := v1Records(t, adm, before, tenant); len(recs) != 0 {
		t.Errorf("the v1 topics received this test's records:\n%s", strings.Join(recs, "\n"))
	}
}
