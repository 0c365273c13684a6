package testsignal_test

import (
	"testing"

	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
)

// TestFailpoint checks the failpoint grammar and where each kind fires: after-db-commit:N on
// the Nth commit, mid-batch:N:M before record M of the Nth batch (or of the first later batch
// that has one), each exactly once.
func TestFailpoint(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "after-db-commit", "after-db-commit:0", "after-db-commit:x", "after-db-commit:1:2",
		"mid-batch:2", "mid-batch:0:5", "mid-batch:1:-1", "sometime:1"} {
		if _, err := testsignal.ParseFailpoint(bad); err == nil {
			t.Errorf("ParseFailpoint(%q) accepted", bad)
		}
	}

	fp, err := testsignal.ParseFailpoint("after-db-commit:3")
	if err != nil || fp != (testsignal.Failpoint{Kind: testsignal.FailAfterDBCommit, Batch: 3}) {
		t.Fatalf("after-db-commit:3 = %+v, %v", fp, err)
	}
	var d testsignal.Ingester
	prev := 0
	d.AfterDBCommit = func() { prev++ }
	kills := 0
	fp.Install(&d, func() { kills++ })
	for i := 1; i <= 5; i++ {
		d.AfterDBCommit()
		if want := min(1, i/3); kills != want {
			t.Errorf("after commit %d: kills = %d, want %d", i, kills, want)
		}
	}
	if prev != 5 {
		t.Errorf("chained hook ran %d times, want 5", prev)
	}

	fp, err = testsignal.ParseFailpoint("mid-batch:2:50")
	if err != nil || fp != (testsignal.Failpoint{Kind: testsignal.FailMidBatch, Batch: 2, After: 50}) {
		t.Fatalf("mid-batch:2:50 = %+v, %v", fp, err)
	}
	d, kills = testsignal.Ingester{}, 0
	var at [2]int // batch, index of the kill
	batch := 0
	fp.Install(&d, func() { kills++; at = [2]int{batch, 0} })
	for _, size := range []int{200, 30, 200, 200} { // batch 2 is too short: batch 3 fires
		batch++
		for i := range size {
			d.BeforeRecord(i)
			if kills == 1 && at == [2]int{batch, 0} {
				at[1] = i
			}
		}
	}
	if kills != 1 || at != [2]int{3, 50} {
		t.Errorf("mid-batch:2:50 fired %d times, at batch/index %v; want once at [3 50]", kills, at)
	}
}
