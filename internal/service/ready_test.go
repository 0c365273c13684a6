package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
)

// TestReadyzNeedsABroker: a service that relays the outbox (service.Run) is ready only while a
// broker answers, lease or no lease: with its brokers at a closed port /readyz answers 503
// naming Kafka (and keeps answering it), with the real broker 200.
func TestReadyzNeedsABroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs service.Run on PostgreSQL and the real broker")
	}
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name    string
		brokers []string
		code    int
		body    string
	}{
		{"BrokersDown", []string{nowhere}, http.StatusServiceUnavailable, "kafka: no broker answered"},
		{"BrokerUp", kafkatest.Brokers(), http.StatusOK, "ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs lockedWriter
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- service.RunLoop(ctx, service.LoopSpec("escalator", service.Infra{DatabaseURL: pgtest.NewURL(t), AdminAddr: "127.0.0.1:0"}, "", relay.ForService(c.brokers, nil)),
					service.Deps{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registry: prometheus.NewRegistry()},
					func(ctx context.Context, _ *service.Runtime) error { <-ctx.Done(); return nil })
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("service.Run = %v", err)
				}
			}()
			url := "http://" + adminAddr(t, &logs) + "/readyz"
			get := func() (int, string) {
				resp, err := http.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			// Let the first pings finish, then the answer must hold for several of them.
			code, body := get()
			for deadline := time.Now().Add(15 * time.Second); code != c.code && time.Now().Before(deadline); code, body = get() {
				time.Sleep(100 * time.Millisecond)
			}
			for end := time.Now().Add(7 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				if code != c.code || !strings.Contains(body, c.body) {
					t.Fatalf("/readyz = %d %q, want %d with %q", code, body, c.code, c.body)
				}
				if time.Now().After(end) {
					break
				}
				code, body = get()
			}
		})
	}
}

// adminAddr waits for the "admin server listening" line and returns its addr.
func adminAddr(t *testing.T, logs *lockedWriter) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(logs.String(), "\n") {
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "admin server listening" {
				return m.Addr
			}
		}
	}
	t.Fatalf("no \"admin server listening\" line within 30 s:\n%s", logs.String())
	return ""
}
