package demo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/demo"
	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/pipelinetest"
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
		SimAddr: "127.0.0.1:0", IngesterAddr: "127.0.0.1:0", ReconcilerAddr: "127.0.0.1:0", EscalatorAddr: "127.0.0.1:0",
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
}
