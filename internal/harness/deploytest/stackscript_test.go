package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
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
