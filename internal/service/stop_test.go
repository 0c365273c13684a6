package service_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

// TestSIGTERMLogsOneStoppedLine: every service binary, running on the real broker and its own
// database, ends on SIGTERM with exit status 0 and exactly one "<name> stopped" line, at info
// with reason "signal".
func TestSIGTERMLogsOneStoppedLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service binaries on the real broker and PostgreSQL")
	}
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "ingester", "reconciler", "escalator", "query-api")
	h := pipelinetest.New(t, 1)
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := authtest.File(t)
	env := []string{"BOOKRECON_DATABASE_URL=" + h.DBURL, "BOOKRECON_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(), ","),
		"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_TOPIC_SUFFIX=" + h.Suffix, "BOOKRECON_INGESTER_GROUP=" + h.Group,
		"BOOKRECON_INGESTER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_RECONCILER_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_ESCALATOR_ADMIN_ADDR=127.0.0.1:0",
		"BOOKRECON_QUERY_ADDR=127.0.0.1:0", "BOOKRECON_QUERY_ADMIN_ADDR=127.0.0.1:0", "BOOKRECON_TOKENS_FILE=" + tokens,
		"BOOKRECON_PROVIDER_URL=http://127.0.0.1:1"}
	for _, c := range []struct{ bin, started string }{
		{"ingester", "admin server listening"},
		{"reconciler", "admin server listening"},
		{"escalator", "admin server listening"},
		{"query-api", "query API listening"},
	} {
		t.Run(c.bin, func(t *testing.T) {
			t.Parallel()
			var stderr lockedWriter
			cmd := exec.Command(filepath.Join(dir, c.bin))
			cmd.Env, cmd.Stderr = append(os.Environ(), env...), &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() {
				_ = cmd.Process.Kill()
				<-done
			}()
			for deadline := time.Now().Add(60 * time.Second); !strings.Contains(stderr.String(), `"msg":"`+c.started+`"`); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q line within 60 s:\n%s", c.started, stderr.String())
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("still running 30 s after SIGTERM:\n%s", stderr.String())
			}
			var stopped []map[string]any
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Errorf("not a JSON line: %q", line)
					continue
				}
				if m["msg"] == c.bin+" stopped" {
					stopped = append(stopped, m)
				}
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit status %d after SIGTERM, want 0", code)
			}
			if len(stopped) != 1 || stopped[0]["level"] != "INFO" || stopped[0]["reason"] != "signal" {
				t.Errorf("%q lines = %v, want exactly one at INFO with reason signal; log:\n%s", c.bin+" stopped", stopped, stderr.String())
			}
		})
	}
}

// lockedWriter collects a process's stderr while the test reads it.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
