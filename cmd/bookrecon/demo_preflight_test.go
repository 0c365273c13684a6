package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestDemoChecksBeforeDropping: with one of the demo's addresses in use, `bookrecon demo` fails
// naming it and drops or recreates nothing: its topics keep their records and its database is
// not created.
func TestDemoChecksBeforeDropping(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:18080") // the simulator's address
	if err != nil {
		t.Logf("127.0.0.1:18080 is already in use (%v): the demo must refuse all the same", err)
	} else {
		defer held.Close()
	}
	sfx := "preflight" + kafkatest.Suffix()
	tp := topics.FromSuffix(sfx)
	kafkatest.CreateTopics(t, 1, tp.All()...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: tp.Attempts, Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := pipelinetest.BuildBinaries(t, "bookrecon")
	db := "preflight_" + kafkatest.Suffix() + "_demo"
	_, stderr, code := pipelinetest.RunBinary(t, 60*time.Second, filepath.Join(dir, "bookrecon"),
		[]string{"BOOKRECON_DATABASE_URL=" + pgtest.URL(), "BOOKRECON_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(), ",")},
		"demo", "--database", db, "--topic-suffix", sfx)
	if code != 1 || !strings.Contains(stderr, "127.0.0.1:18080 is in use") || !strings.Contains(stderr, "nothing was dropped or recreated") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the address in use", code, stderr)
	}
	if n := len(kafkatest.ReadAll(t, tp.Attempts, 1, time.Second, 20*time.Second)); n != 1 {
		t.Errorf("records on %s = %d, want the 1 written before (the topics were recreated)", tp.Attempts, n)
	}
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil || exists {
		t.Errorf("database %s exists = %v (%v), want not created", db, exists, err)
	}
}
