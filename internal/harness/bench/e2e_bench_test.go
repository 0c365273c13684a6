package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkIngestEndToEnd is BenchmarkIngest's happy end-to-end line with its bare reference
// line, alone, for A/B work and for seeing where the line's time goes (docs/performance.md,
// "Where the end-to-end time goes"):
//
//	go test -run='^$' -bench='^BenchmarkIngestEndToEnd$' -benchtime=1x ./internal/harness/bench/
//
// Each round runs the bare line once, then every arm's end-to-end line (the arms alternate:
// A B, then B A, …), and prints each arm's events/s, its happy / bare and its ratio to the
// first arm: ratios within a round are what an A/B reads on a shared machine.
//
//   - BOOKRECON_BENCH_INGESTERS: the arms, "name=path …" (space-separated) of ingester
//     executables; a path may be a script that sets the environment and execs a binary (it keeps
//     the pid). Default: one arm, this tree's cmd/ingester.
//   - BOOKRECON_BENCH_ROUNDS: rounds (default 1).
//   - BOOKRECON_BENCH_MIX=realistic: the realistic mix instead of the happy one.
//   - BOOKRECON_BENCH_EVENTS: records of the workload (default 200,000).
//   - BOOKRECON_BENCH_WALINSPECT=off: pg_stat_wal alone (startWAL).
//   - BOOKRECON_BENCH_PROFILE=dir: every line is watched (e2eProfile): a CPU profile of the
//     ingester written to dir/ingester-<arm>-<round>.pprof, the CPU each process used,
//     and PostgreSQL's sessions of the line sampled every 10 ms (what each is doing). The
//     sampling costs PostgreSQL a few per cent of a core.
func BenchmarkIngestEndToEnd(b *testing.B) {
	total := ingestEnvInt("BOOKRECON_BENCH_EVENTS", 200000)
	rounds := ingestEnvInt("BOOKRECON_BENCH_ROUNDS", 1)
	profileDir := os.Getenv("BOOKRECON_BENCH_PROFILE")
	mix, mixName := happyMix, "happy"
	if os.Getenv("BOOKRECON_BENCH_MIX") == "realistic" {
		mix, mixName = realisticMix, "realistic"
	}
	w := newWorkload(b, total, mix)
	type arm struct{ name, bin string }
	var arms []arm
	for _, f := range strings.Fields(os.Getenv("BOOKRECON_BENCH_INGESTERS")) {
		name, bin, ok := strings.Cut(f, "=")
		if !ok {
			b.Fatalf("BOOKRECON_BENCH_INGESTERS: %q is not name=path", f)
		}
		arms = append(arms, arm{name, bin})
	}
	if len(arms) == 0 {
		arms = []arm{{"this tree", buildIngester(b)}}
	}
	ctx := context.Background()
	ratios := make([][]float64, len(arms)) // per arm, its events/s over the first arm's, per round
	for range b.N {
		for r := range rounds {
			load := loadAverage()
			bare := ingestBareCeiling(b, ctx, w.decoded, w.hashes)
			order := make([]int, len(arms))
			for i := range order {
				order[i] = i
			}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			perSec := make([]float64, len(arms))
			for _, i := range order {
				o := e2eOptions{bin: arms[i].bin}
				if profileDir != "" {
					o.profile = &e2eProfile{out: filepath.Join(profileDir, fmt.Sprintf("ingester-%s-%d.pprof", strings.ReplaceAll(arms[i].name, " ", "-"), r+1))}
				}
				lineLoad := loadAverage()
				run, _, _ := ingestEndToEnd(b, ctx, w.gen, o)
				perSec[i] = run.perSec
				fmt.Printf("  round %d, %-12s %s mix end to end %8.0f events/s  %s  (load %s → %s)\n",
					r+1, arms[i].name, mixName, run.perSec, run.wal.perEvent(run.events), lineLoad, loadAverage())
				if o.profile != nil {
					fmt.Print(o.profile.report())
				}
			}
			fmt.Printf("round %d: %d records (%d unique); bare reference line %.0f events/s; load %s at the start, %s at the end\n",
				r+1, len(w.gen.Records), w.gen.UniqueEvents, bare.perSec, load, loadAverage())
			for i, a := range arms {
				ratios[i] = append(ratios[i], perSec[i]/perSec[0])
				fmt.Printf("  %-12s %8.0f events/s   %s / bare = %.3f   / %s = %.3f\n", a.name, perSec[i], mixName, perSec[i]/bare.perSec, arms[0].name, perSec[i]/perSec[0])
			}
		}
		for i, a := range arms[1:] {
			rs := slices.Sorted(slices.Values(ratios[i+1]))
			fmt.Printf("%s / %s over %d rounds: median %.3f (min %.3f, max %.3f)\n", a.name, arms[0].name, len(rs), rs[len(rs)/2], rs[0], rs[len(rs)-1])
		}
	}
}

// benchAppName is the application_name of the bench's own sessions on a line's database, so
// e2eProfile leaves them out.
const benchAppName = "bookrecon-bench"

// withAppName returns dbURL with its application_name set to name.
func withAppName(b *testing.B, dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// e2eProfile watches one end-to-end line while it runs:
//   - a CPU profile of the ingester (its /debug/pprof/profile, profileSeconds long or less);
//   - the CPU (user + system, from /proc/<pid>/stat) used by the ingester, by the line
//     database's PostgreSQL sessions, by PostgreSQL's shared processes (WAL writer,
//     checkpointer, background writer, autovacuum: cluster-wide, other databases' work is in
//     them), by the Kafka broker, and by the whole machine (/proc/stat);
//   - every 10 ms, pg_stat_activity of the line's database: for each of the ingester's
//     sessions, whether PostgreSQL is executing a statement (and which, by verb and table, and
//     on what it waits), waiting for the ingester inside a transaction, or idle. The batch's
//     transaction and the relay's statements are told apart by their tables (outbox reads and
//     updates, the lease, are the relay's).
//
// It also reads the ingester's bookrecon_ingest_batch_seconds (apply to offset commit, per
// batch) at the end.
type e2eProfile struct {
	out string // where the CPU profile goes

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    sync.WaitGroup
	began   time.Time
	ended   time.Time
	admin   string
	pid     int
	cpu     map[int]*procCPU // by pid
	machine [2][2]uint64     // /proc/stat busy and total jiffies, at start and end
	ticks   int              // pg_stat_activity samples
	// states counts samples by what a session was doing ("batch: executing insert outbox",
	// "batch: transaction open, waiting for the ingester", …).
	states map[string]int
	// batchOpen, relayBusy and both count samples where a batch transaction was open, where the
	// relay had a statement running or a transaction open, and where both held.
	batchOpen, relayBusy, both int
	profErr                    error
	batchSum, batchCount       float64 // bookrecon_ingest_batch_seconds at the end
	events                     int
	wall                       time.Duration
}

// procCPU is one process's CPU in clock ticks at first and last sight.
type procCPU struct {
	group       string
	first, last uint64
}

// profileSeconds is the CPU profile's length: shorter than the happy line, which runs 9–30 s
// (200,000 records) depending on the machine.
const profileSeconds = 6

func (p *e2eProfile) start(b *testing.B, ctx context.Context, pid int, dbURL, admin string) {
	p.pid, p.admin, p.began = pid, admin, time.Now()
	p.cpu = map[int]*procCPU{}
	p.states = map[string]int{}
	p.machine[0] = machineJiffies()
	p.see(pid, "ingester")
	for _, k := range kafkaPids() {
		p.see(k, "kafka broker")
	}
	conn := adminConn(b, ctx, dbURL)
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	role := u.User.Username()
	ctx, p.cancel = context.WithCancel(ctx)
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		defer conn.Close(context.Background())
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p.sample(ctx, conn, role)
		}
	}()
	go func() {
		defer p.done.Done()
		p.profErr = fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, profileSeconds), p.out)
	}()
}

// see records pid's CPU now under group.
func (p *e2eProfile) see(pid int, group string) {
	t, ok := procTicks(pid)
	if !ok {
		return
	}
	c := p.cpu[pid]
	if c == nil {
		c = &procCPU{group: group, first: t}
		p.cpu[pid] = c
	}
	c.last = t
}

// sample reads pg_stat_activity once: the line database's sessions of role (the ingester's)
// other than the bench's, and PostgreSQL's shared processes. Every 20th sample also reads the
// CPU of every process seen.
func (p *e2eProfile) sample(ctx context.Context, conn *pgx.Conn, role string) {
	rows, err := conn.Query(ctx, stmts.SQL("activity_sample"), role, benchAppName)
	if err != nil {
		return
	}
	type act struct {
		pid                      int
		backend, state, wt, w, q string
		db                       bool
	}
	var acts []act
	for rows.Next() {
		var a act
		if rows.Scan(&a.pid, &a.backend, &a.state, &a.wt, &a.w, &a.q, &a.db) == nil {
			acts = append(acts, a)
		}
	}
	rows.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ticks++
	batch, relayOn := false, false
	for _, a := range acts {
		if !a.db {
			if p.ticks%20 == 1 {
				p.see(a.pid, "postgresql shared processes")
			}
			continue
		}
		if p.ticks%20 == 1 {
			p.see(a.pid, "postgresql sessions of the line")
		}
		kind := stmtKind(a.q)
		who := "batch"
		if isRelayStatement(kind) {
			who = "relay"
		}
		var what string
		switch a.state {
		case "active":
			what = who + ": executing " + kind
			if a.wt != "" {
				what += " (waiting: " + a.wt + "/" + a.w + ")"
			}
		case "idle in transaction":
			what = who + ": transaction open, waiting for the ingester (last: " + kind + ")"
		default:
			continue
		}
		p.states[what]++
		if who == "batch" {
			batch = true
		} else {
			relayOn = true
		}
	}
	if p.ticks%20 == 1 {
		p.see(p.pid, "ingester")
		for pid, c := range p.cpu {
			if c.group == "kafka broker" {
				p.see(pid, c.group)
			}
		}
	}
	if batch {
		p.batchOpen++
	}
	if relayOn {
		p.relayBusy++
	}
	if batch && relayOn {
		p.both++
	}
}

// isRelayStatement reports whether a statement kind (stmtKind) is the relay's: it reads the
// outbox's pending rows, marks them published and keeps its lease; the batch only inserts
// outbox rows.
func isRelayStatement(kind string) bool {
	return kind == "select outbox" || kind == "update outbox" || strings.Contains(kind, "outbox_lease")
}

func (p *e2eProfile) stop(b *testing.B, ctx context.Context, events int, wall time.Duration) {
	p.mu.Lock()
	p.see(p.pid, "ingester")
	for pid, c := range p.cpu {
		p.see(pid, c.group)
	}
	p.machine[1] = machineJiffies()
	p.ended = time.Now()
	p.events, p.wall = events, wall
	p.mu.Unlock()
	p.batchSum, p.batchCount = scrapeHistogram(ctx, p.admin, "bookrecon_ingest_batch_seconds")
	p.cancel()
	p.done.Wait()
}

// report is the profile as text.
func (p *e2eProfile) report() string {
	var sb strings.Builder
	el := p.ended.Sub(p.began).Seconds()
	fmt.Fprintf(&sb, "    watched %.1f s (the line %.1f s, %d unique events after the first batch)\n", el, p.wall.Seconds(), p.events)
	groups := map[string]float64{}
	for _, c := range p.cpu {
		groups[c.group] += float64(c.last-c.first) / clockTicks
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for g := range groups {
			if !yield(g) {
				return
			}
		}
	})
	fmt.Fprintf(&sb, "    CPU (cores = CPU seconds / watched seconds):\n")
	for _, g := range names {
		fmt.Fprintf(&sb, "      %-34s %6.2f cores  %7.1f CPU ms / 1,000 events\n", g, groups[g]/el, groups[g]*1e6/float64(p.events))
	}
	busy, total := float64(p.machine[1][0]-p.machine[0][0]), float64(p.machine[1][1]-p.machine[0][1])
	if total > 0 {
		fmt.Fprintf(&sb, "      %-34s %6.2f cores busy of %d (%.0f%%)\n", "whole machine", busy/total*float64(cores()), cores(), busy/total*100)
	}
	if p.batchCount > 0 {
		fmt.Fprintf(&sb, "    batches: %.0f, %.1f ms each from apply to offset commit; %.0f%% of the line's wall\n",
			p.batchCount, p.batchSum/p.batchCount*1000, p.batchSum/p.wall.Seconds()*100)
	}
	if p.ticks > 0 {
		t := float64(p.ticks)
		fmt.Fprintf(&sb, "    PostgreSQL sessions, %d samples 10 ms apart (share of samples; a share of a session's time):\n", p.ticks)
		fmt.Fprintf(&sb, "      batch transaction open %.1f%%, relay busy %.1f%%, both %.1f%%\n", float64(p.batchOpen)/t*100, float64(p.relayBusy)/t*100, float64(p.both)/t*100)
		keys := make([]string, 0, len(p.states))
		for k := range p.states {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return cmp.Or(p.states[keys[j]]-p.states[keys[i]], strings.Compare(keys[i], keys[j])) < 0
		})
		for _, k := range keys {
			fmt.Fprintf(&sb, "      %6.1f%%  %s\n", float64(p.states[k])/t*100, k)
		}
	}
	if p.profErr != nil {
		fmt.Fprintf(&sb, "    CPU profile: %v\n", p.profErr)
	} else {
		fmt.Fprintf(&sb, "    CPU profile of the ingester (%d s): %s (go tool pprof -top %s)\n", profileSeconds, p.out, p.out)
	}
	return sb.String()
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

func cores() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && !strings.HasPrefix(l, "cpu ") {
			n++
		}
	}
	return n
}

// procTicks is a process's user + system time in clock ticks.
func procTicks(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command may hold spaces and parentheses: the fields start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	return u + s, err1 == nil && err2 == nil
}

// machineJiffies is /proc/stat's busy and total time of all cores.
func machineJiffies() [2]uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return [2]uint64{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy, total uint64
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return [2]uint64{busy, total}
}

// kafkaPids are the processes running the single-node broker of scripts/stack.sh.
func kafkaPids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(c), "kafka.Kafka") && strings.Contains(string(c), ".stack/kafka/server.properties") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fetchTo writes what url answers to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// scrapeHistogram reads a histogram's _sum and _count from the ingester's /metrics (0, 0 when
// unreadable).
func scrapeHistogram(ctx context.Context, admin, name string) (sum, count float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case name + "_sum":
			sum = v
		case name + "_count":
			count = v
		}
	}
	return sum, count
}
