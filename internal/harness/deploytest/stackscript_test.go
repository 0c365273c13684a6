package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStackJarsSurviveMvnBeforeLibsExists: the first run of scripts/stack.sh resolves the Kafka
// jars with mvn and reports progress while it runs. mvn creates .stack/kafka/libs only when it
// copies its first jar; a progress line that looked before then used to kill the script (find on
// a missing directory, under set -euo pipefail), leaving mvn running alone and `make demo` failing
// with no reason. Here a stand-in mvn on PATH waits three progress intervals before it copies two
// jars: the script reports "0 copied so far", then "Kafka jars ready: 2 jars", and exits 0.
func TestStackJarsSurviveMvnBeforeLibsExists(t *testing.T) {
	t.Parallel()
	root0, root := root(t), t.TempDir()
	for _, dir := range []string{"scripts/kafka", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile(filepath.Join(root0, "scripts", "stack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("scripts/stack.sh", string(script), 0o755)
	write("scripts/kafka/pom.xml", "<project/>\n", 0o644)
	// The stand-in: finds -DoutputDirectory=…, sleeps, then copies two jars there.
	write("bin/mvn", `#!/usr/bin/env bash
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
sleep 1.5
mkdir -p "$out" && touch "$out/kafka_2.13-4.1.1.jar" "$out/kafka-clients-4.1.1.jar"
`, 0o755)
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "stack.sh"), "jars")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "STACK_PROGRESS_EVERY=0.4")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stack.sh jars: %v\n%s", err, out)
	}
	for _, want := range []string{"still resolving Kafka jars: 0 copied so far", "Kafka jars ready: 2 jars"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stack.sh jars output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".stack", "kafka", "libs", ".complete")); err != nil {
		t.Errorf("libs/.complete not written: %v", err)
	}
}

// TestStackClusterIDNeverStartsWithDash: the three-broker cluster's id is passed to
// kafka-storage format as "-t <id>", and an id that starts with '-' is read as a missing
// argument: every node's format failed and TestLoadBrokerFailover with it (CI, 2026-12-02, id
// "-IT2zN-fan0VFB-gGS3cUQ"; 1 id in 64). `stack.sh cluster id` replaces such a kept id, and
// never makes one: 300 fresh ids, each 22 base64url characters not starting with '-' (before
// the fix ~4.7 of them would have).
func TestStackClusterIDNeverStartsWithDash(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile(filepath.Join(root(t), "scripts", "stack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "stack.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(dir, ".stack", "kafka-cluster", "cluster.id")
	if err := os.MkdirAll(filepath.Dir(idFile), 0o755); err != nil {
		t.Fatal(err)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{21}$`)
	id := func() string {
		t.Helper()
		out, err := exec.Command("bash", filepath.Join(dir, "scripts", "stack.sh"), "cluster", "id").CombinedOutput()
		if err != nil {
			t.Fatalf("stack.sh cluster id: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	const bad = "-IT2zN-fan0VFB-gGS3cUQ"
	if err := os.WriteFile(idFile, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	got := id()
	if !valid.MatchString(got) {
		t.Fatalf("kept id %s: stack.sh cluster id = %q, want a new id matching %s", bad, got, valid)
	}
	if kept, _ := os.ReadFile(idFile); string(kept) != got {
		t.Errorf("cluster.id = %q after replacing %s, want %q", kept, bad, got)
	}
	if again := id(); again != got {
		t.Errorf("a valid kept id: stack.sh cluster id = %q, want it kept: %q", again, got)
	}
	for i := range 300 {
		if err := os.Remove(idFile); err != nil {
			t.Fatal(err)
		}
		if got := id(); !valid.MatchString(got) {
			t.Fatalf("fresh id %d = %q, want one matching %s", i, got, valid)
		}
	}
}
