package samples_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

// TestCopyMatchesShared: the repository's samples/ is byte for byte the normative
// ../shared/samples (every file of it, and no other), when that folder stands beside the
// repository as it does in CI.
func TestCopyMatchesShared(t *testing.T) {
	own, err := samples.Dir()
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(own, "..", "..", "shared", "samples")
	want, err := os.ReadDir(shared)
	if os.IsNotExist(err) {
		t.Skipf("%s is not beside the repository: nothing to compare the copy with (CI has it beside)", shared)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadDir(own)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("samples/ holds %d files, ../shared/samples %d", len(got), len(want))
	}
	for _, e := range want {
		a, err := os.ReadFile(filepath.Join(shared, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(own, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("samples/%s differs from ../shared/samples/%s (%v): copy it again", e.Name(), e.Name(), err)
		}
	}
}
