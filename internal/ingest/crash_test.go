package ingest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

// proc is one cmd/ingester subprocess.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu    sync.Mutex
	log   bytes.Buffer
	admin string // bound admin address, from the "admin server listening" log line
}

// startIngesterProcess runs bin against h with the extra environment env.
func startIngesterProcess(t *testing.T, bin string, h *pipelinetest.Harness, env ...string) *proc {
	t.Helper()
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"BOOKRECON_DATABASE_URL="+h.DBURL,
		"BOOKRECON_KAFKA_BROKERS="+strings.Join(kafkatest.Brokers(), ","),
		"BOOKRECON_PROVIDERS="+mp,
		"BOOKRECON_INGESTER_GROUP="+h.Group,
		"BOOKRECON_TOPIC_SUFFIX="+strings.TrimPrefix(h.Topics.Attempts, events.TopicAttempts+"."),
		"BOOKRECON_MAX_POLL_RECORDS=200",
		"BOOKRECON_FAILPOINT=",
	)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct{ Msg, Addr string }
			_ = json.Unmarshal(sc.Bytes(), &l)
			p.mu.Lock()
			p.log.Write(sc.Bytes())
			p.log.WriteByte('\n')
			if l.Msg == "admin server listening" {
				p.admin = l.Addr
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("ingester log (tail):\n%s", p.tail(40))
		}
	})
	return p
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(p.log.String()), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p *proc) adminAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admin
}

// wait waits for the process to exit, sending SIGTERM after bound (a safety bound: a process
// still running then exits normally, which the caller reports as "not killed").
func (p *proc) wait(bound time.Duration) *os.ProcessState {
	select {
	case <-p.done:
	case <-time.After(bound):
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}
	return p.cmd.ProcessState
}

func killedBySIGKILL(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// scrape returns the sum of the series of a counter family on the process's /metrics.
func scrape(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("scrape %q: %v", line, err)
		}
		total += v
	}
	return int(total)
}

// buildIngester builds cmd/ingester with the failpoint tag (its BOOKRECON_FAILPOINT: the
// production binary has none) into dir.
func buildIngester(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "ingester")
	out, err := exec.Command("go", "build", "-tags", "failpoint", "-o", bin, "github.com/bookrecon/bookrecon/cmd/ingester").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -tags failpoint cmd/ingester: %v\n%s", err, out)
	}
	return bin
}

// TestCrashPoints kills the real ingester binary with SIGKILL at a failpoint, restarts it without
// one, and checks that nothing was lost and nothing applied twice:
//   - after-db-commit:3: the third batch is committed in PostgreSQL but not in Kafka; the
//     restart redelivers exactly that batch, and every record of it is a duplicate delivery;
//   - mid-batch:2:50, one lane: the second batch's transaction dies open after 50 records;
//     none of it survives, the restart applies it whole, with no duplicate delivery;
//   - mid-batch:3:50, two lanes (BOOKRECON_INGEST_LANES=2): the third lane's transaction — of
//     the second poll or later, a poll having at most two — dies open after 50 records, while
//     the poll's other lane may have committed: PostgreSQL holds at least the committed
//     offsets, and the restart redelivers the poll, any committed lane's records as duplicate
//     deliveries (which of the two happens is the lanes' timing: the test holds both).
func TestCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("crash points: builds and kills cmd/ingester; the restart waits out the group session")
	}
	t.Parallel()
	bin := buildIngester(t, t.TempDir())
	for _, c := range []struct {
		failpoint string
		lanes     string // BOOKRECON_INGEST_LANES of the run that crashes
		// ahead: at the crash, PostgreSQL holds more records than the committed offsets
		// ("more"), exactly as many ("equal"), or either ("either": a lane may have committed).
		ahead string
	}{
		{"after-db-commit:3", "1", "more"},
		{"mid-batch:2:50", "1", "equal"},
		{"mid-batch:3:50", "2", "either"},
	} {
		t.Run(c.failpoint+"/lanes:"+c.lanes, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			h := pipelinetest.New(t, 3)
			m := newModel(t, h, "crash", 750)
			n := len(m.events)
			recs := make([]*kgo.Record, 0, n)
			for i := range m.events {
				recs = append(recs, &kgo.Record{Key: m.keys[i], Value: m.events[i]})
			}
			produce(t, h.Producer, h.Topics.Attempts, recs)
			adm := kafkatest.Admin(t)

			// Run 1: dies at the failpoint.
			p := startIngesterProcess(t, bin, h, "BOOKRECON_FAILPOINT="+c.failpoint, "BOOKRECON_INGEST_LANES="+c.lanes, "BOOKRECON_INGESTER_ADMIN_ADDR=-")
			if ps := p.wait(2 * time.Minute); !killedBySIGKILL(ps) {
				t.Fatalf("ingester with %s ended with %v, want killed by SIGKILL", c.failpoint, ps)
			}
			inDB := h.Scalar(`SELECT count(*) FROM processed_event`)
			_, committed := groupLag(t, adm, h.Group, h.Topics.Attempts)
			t.Logf("at the crash: %d events in PostgreSQL, %d offsets committed, of %d", inDB, committed, n)
			if committed == 0 || inDB >= n {
				t.Fatalf("crash point not mid-stream: committed offsets %d, processed events %d of %d", committed, inDB, n)
			}
			switch {
			case c.ahead == "more" && int64(inDB) <= committed:
				t.Errorf("after the DB commit: processed events %d, want more than committed offsets %d", inDB, committed)
			case c.ahead == "equal" && int64(inDB) != committed:
				t.Errorf("open transaction killed: processed events %d, want exactly the committed offsets %d", inDB, committed)
			case c.ahead == "either" && int64(inDB) < committed:
				t.Errorf("a lane's open transaction killed: processed events %d, want at least the committed offsets %d", inDB, committed)
			}

			// Run 2: resumes from the committed offsets.
			p = startIngesterProcess(t, bin, h, "BOOKRECON_INGESTER_ADMIN_ADDR=127.0.0.1:0")
			h.WaitFor("the restarted ingester to commit every record", 3*time.Minute, func() bool {
				select {
				case <-p.done:
					t.Fatalf("restarted ingester exited: %v", p.err)
				default:
				}
				lag, _ := groupLag(t, adm, h.Group, h.Topics.Attempts)
				return lag == 0 && p.adminAddr() != ""
			})
			consumed := scrape(t, p.adminAddr(), "bookrecon_events_consumed_total")
			dups := scrape(t, p.adminAddr(), "bookrecon_duplicate_deliveries_total")
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if ps := p.wait(time.Minute); !ps.Success() {
				t.Errorf("restarted ingester: %v, want a clean exit on SIGTERM", ps)
			}

			assertModel(t, h, m)
			t.Logf("restart consumed %d, duplicate deliveries %d", consumed, dups)
			if want := n - int(committed); consumed != want {
				t.Errorf("restart consumed %d records, want the uncommitted %d", consumed, want)
			}
			if want := inDB - int(committed); dups != want {
				t.Errorf("duplicate deliveries = %d, want the records committed in PostgreSQL but not in Kafka = %d", dups, want)
			}
			if c.ahead == "more" && dups == 0 {
				t.Errorf("duplicate deliveries = 0, want the redelivered batch")
			}
			t.Logf("wall time %s", time.Since(began).Round(time.Millisecond))
		})
	}
}
