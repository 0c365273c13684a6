package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	truthPath = "../../providers/testdata/provider-truth.json"
	mapPath   = "../../providers/testdata/providers.yaml"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want config
	}{
		{
			name: "defaults",
			args: []string{"-providers", "p.yaml"},
			want: config{addr: "127.0.0.1:18080", providers: "p.yaml", seed: 1},
		},
		{
			name: "environment",
			env: map[string]string{"PROVIDER_SIM_ADDR": ":9000", "PROVIDER_SIM_PROVIDERS": "e.yaml", "PROVIDER_SIM_TRUTH": "t.json",
				"PROVIDER_SIM_EPOCH": "2026-11-30T09:00:00Z", "PROVIDER_SIM_SEED": "7", "PROVIDER_SIM_FAULTS": `{"serverError":0.5}`},
			want: config{addr: ":9000", providers: "e.yaml", truth: "t.json", epoch: epoch, seed: 7, faults: simulator.Faults{ServerError: 0.5}},
		},
		{
			name: "flags win over the environment",
			args: []string{"-addr", "127.0.0.1:0", "-providers", "f.yaml", "-shift", "1h30m", "-seed", "3"},
			env:  map[string]string{"PROVIDER_SIM_ADDR": ":9000", "PROVIDER_SIM_PROVIDERS": "e.yaml", "PROVIDER_SIM_SEED": "7"},
			want: config{addr: "127.0.0.1:0", providers: "f.yaml", shift: 90 * time.Minute, seed: 3},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConfig(tt.args, envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := parseConfig([]string{"-shift", "soon", "-epoch", "yesterday", "-seed", "x", "-faults", `{"slow":2}`, "extra"}, envOf(nil))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`unexpected arguments ["extra"]`,
		"-providers (PROVIDER_SIM_PROVIDERS): required",
		"-shift and -epoch exclude each other",
		`-shift: "soon" is not a Go duration`,
		`-epoch: "yesterday" is not an RFC 3339 time`,
		`-seed: "x" is not an integer`,
		"-faults: simulator: invalid faults: slow: probability 2 outside [0, 1]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	if _, err := parseConfig([]string{"-nope"}, envOf(nil)); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

// TestRunServesTheRebasedSample starts the binary's run in-process with -epoch, asks it for the
// sample's sc03 booking through the HTTP adapter, then stops it as a signal would.
func TestRunServesTheRebasedSample(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := start
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	logs := &logtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, deps{
			args:      []string{"-addr", "127.0.0.1:0", "-providers", mapPath, "-truth", truthPath, "-epoch", "2026-11-30T09:00:00Z"},
			lookupEnv: envOf(nil),
			stderr:    logs,
			now:       clock,
			listening: func(a net.Addr) { addrc <- a },
		})
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	}

	p := providers.NewHTTP("http://"+addr.String(), nil, providers.WithClock(clock))
	q := providers.Query{Provider: "sim-hotels", Operation: events.OpBook, Kind: providers.LookupClientReference, Value: "cr_sc03"}
	// HTL-30303 was created 6 s after the sample's first record, which is now "start".
	if got, err := p.Lookup(t.Context(), q); err != nil || len(got) != 0 {
		t.Errorf("at start = %v, %v; want not yet created", got, err)
	}
	mu.Lock()
	now = start.Add(6 * time.Second)
	mu.Unlock()
	got, err := p.Lookup(t.Context(), q)
	if err != nil || len(got) != 1 || got[0].ProviderReference != "HTL-30303" || !got[0].CreatedAt.Equal(start.Add(6*time.Second)) {
		t.Errorf("at start+6s = %+v, %v; want HTL-30303 created at start+6s", got, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v, want a clean shutdown", err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Shift   string `json:"shift"`
			Service string `json:"service"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Service != "provider-sim" {
			t.Errorf("log line %q: service = %q, want provider-sim", line, rec.Service)
		}
		msgs = append(msgs, rec.Msg)
		if rec.Msg == "listening" && rec.Shift != start.Sub(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)).String() {
			t.Errorf("shift logged %q", rec.Shift)
		}
	}
	if diff := cmp.Diff([]string{"listening", "shutting down", "stopped"}, msgs); diff != "" {
		t.Errorf("log messages mismatch (-want +got):\n%s", diff)
	}
}

func TestRunFailsOnBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"-providers", "missing.yaml"},
		{"-providers", mapPath, "-truth", "missing.json"},
		{"-providers", mapPath, "-addr", "256.0.0.1:99999"},
	} {
		err := run(t.Context(), deps{args: args, lookupEnv: envOf(nil), stderr: &logtest.Buffer{}, now: time.Now})
		if err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
