package demo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/demo"
	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/samples"
)

// TestSampleEndToEnd runs the whole pipeline — simulator, ingester, reconciler, escalator — on
// the sample through the real broker, paced as samples/README.md says, and requires the end
// state of expected.json exactly: all 29 attempts, the 11 escalations each published once and no
// other, the 10 dead letters, and the counts read from /metrics.
func TestSampleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: about two minutes")
	}
	t.Parallel()
	h := pipelinetest.New(t, 3)
	dir, err := samples.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{
		Brokers: kafkatest.Brokers(), DatabaseURL: h.DBURL, SamplesDir: dir, Topics: h.Topics, Group: h.Group,
		SimAddr: "127.0.0.1:0", IngesterAddr: "127.0.0.1:0", ReconcilerAddr: "127.0.0.1:0", EscalatorAddr: "127.0.0.1:0", QueryAddr: "127.0.0.1:0",
		Out: &out,
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("report:\n%s", res.Report)
	if !res.Report.OK() {
		t.Fatalf("the sample's end state differs from expected.json:\n%s", res.Report)
	}
	if n := len(res.Report.Lines); n != 25 {
		t.Errorf("report has %d lines, want 23 scenarios + dead letters + counts", n)
	}

	// What booking services see through the query API on the end state.
	for _, c := range []struct {
		intent string
		want   query.IntentStatus
		reason attempt.GateReason
	}{
		{"bi_sc03", query.IntentStatus{Status: "confirmed", LatestVersion: 1}, attempt.GateEarlierConfirmed},
		{"bi_sc05", query.IntentStatus{Status: "failed", CanBuyAgain: true, LatestVersion: 1}, attempt.GateSafeRetry},
		{"bi_sc08", query.IntentStatus{Status: "being_verified", LatestVersion: 1}, attempt.GateEarlierUnknown},
		{"bi_sc13", query.IntentStatus{Status: "failed", LatestVersion: 1}, attempt.GateNotRetryable},
		{"bi_sc18", query.IntentStatus{Status: "confirmed", LatestVersion: 2}, attempt.GateEarlierConfirmed},
	} {
		st, gate, err := query.Status(ctx, h.Pool, h.Providers, "t_globetrek", c.intent, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", c.intent, err)
		}
		c.want.TenantID, c.want.BookingIntentID = "t_globetrek", c.intent
		if st != c.want || gate.Reason != c.reason {
			t.Errorf("%s: status %+v gate %s; want %+v gate %s", c.intent, st, gate.Reason, c.want, c.reason)
		}
	}
}
