package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBuildInfo(t *testing.T) {
	reg := telemetry.NewRegistry()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	for _, mf := range mfs {
		if mf.GetName() == "bookrecon_build_info" {
			labels = map[string]string{}
			for _, l := range mf.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 1 {
				t.Errorf("bookrecon_build_info = %v, want 1", v)
			}
		}
	}
	if labels == nil {
		t.Fatal("bookrecon_build_info not registered")
	}
	if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["revision"] == "" || len(labels) != 3 {
		t.Errorf("bookrecon_build_info labels = %v", labels)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestBuildInfoOverride(t *testing.T) {
	telemetry.Version, telemetry.Revision = "v1.2.3", "abc123"
	defer func() { telemetry.Version, telemetry.Revision = "", "" }()
	if b := telemetry.ReadBuild(); b.Version != "v1.2.3" || b.Revision != "abc123" {
		t.Errorf("ReadBuild = %+v, want the -X overrides", b)
	}
}

// TestParseLevel: BOOKRECON_LOG_LEVEL's values, and info for anything unreadable.
func TestParseLevel(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"", slog.LevelInfo, false},
		{"debug", slog.LevelDebug, false},
		{"WARN", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"warn+2", slog.LevelWarn + 2, false},
		{"loud", slog.LevelInfo, true},
	} {
		got, err := telemetry.ParseLevel(c.in)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

// TestLogStream checks the one log format: JSON lines with time, level, msg and service, errors
// under err, and franz-go's lines in the same stream through kslog with component=franz-go.
func TestLogStream(t *testing.T) {
	var buf logtest.Buffer
	log := telemetry.NewLogger(&buf, "ingester", slog.LevelDebug)
	log.Warn("batch paused; retrying", "records", 3, "err", errors.New("boom"))
	cl, err := kgo.NewClient(kafka.Options([]string{"127.0.0.1:1"}, log, nil, "ingester")...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = cl.Ping(ctx) // fails: nothing listens on port 1; franz-go logs the attempt
	cancel()
	cl.Close()

	franz := 0
	for line := range strings.Lines(buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		for _, k := range []string{"time", "level", "msg", "service"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("line without %q: %s", k, line)
			}
		}
		if rec["service"] != "ingester" {
			t.Errorf("service = %v in %s", rec["service"], line)
		}
		if _, ok := rec["error"]; ok {
			t.Errorf("errors go under err, not error: %s", line)
		}
		if rec["component"] == "franz-go" {
			franz++
		}
	}
	if franz == 0 {
		t.Errorf("no franz-go line in the stream:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), `"err":"boom"`) {
		t.Errorf("error not logged under err:\n%s", buf.String())
	}
}

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	reg := telemetry.NewRegistry()
	ready := errors.New("database down")
	var mu sync.Mutex
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- telemetry.Serve(ctx, "127.0.0.1:0", reg, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			return ready
		}, slog.New(slog.DiscardHandler), func(a string) { addrc <- a })
	}()
	base := "http://" + <-addrc
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/livez"); code != 200 {
		t.Errorf("/livez = %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "database down") {
		t.Errorf("/readyz = %d %q, want 503", code, body)
	}
	mu.Lock()
	ready = nil
	mu.Unlock()
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d once ready", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "bookrecon_build_info{") {
		t.Errorf("/metrics = %d without bookrecon_build_info", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
