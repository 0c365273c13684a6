package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hiddenKeys are keys binaries read but deploy.md does not list, with why.
var hiddenKeys = map[string]string{"BOOKRECON_FAILPOINT": "crash tests only: cmd/ingester built with -tags failpoint"}

var docKeyRE = regexp.MustCompile("`((?:BOOKRECON)?_[A-Z0-9_]+)`")

// TestConfigKeysDocumented: every BOOKRECON_* key a binary reads has a row in docs/deploy.md
// "Configuration keys" — spelt out, or as a `_SUFFIX` after a key of the same prefix
// (`BOOKRECON_QUERY_ADDR` / `_DB_CONNS`).
func TestConfigKeysDocumented(t *testing.T) {
	doc := string(readFile(t, "docs/deploy.md"))
	start := strings.Index(doc, "### Configuration keys")
	if start < 0 {
		t.Fatal(`docs/deploy.md: no "### Configuration keys" section`)
	}
	documented := map[string]bool{}
	for line := range strings.Lines(doc[start:]) {
		if !strings.HasPrefix(line, "| `BOOKRECON_") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		prefix := ""
		for _, m := range docKeyRE.FindAllStringSubmatch(first, -1) {
			k := m[1]
			if strings.HasPrefix(k, "_") {
				k = prefix + k
			} else {
				prefix = k[:strings.LastIndex(k, "_")]
			}
			documented[k] = true
		}
	}
	dirs, err := os.ReadDir(filepath.Join(root(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		keys, _ := binaryKeys(t, d.Name())
		for k := range keys {
			if strings.HasPrefix(k, "BOOKRECON_") && !documented[k] && hiddenKeys[k] == "" {
				t.Errorf("cmd/%s reads %s, which docs/deploy.md \"Configuration keys\" does not list", d.Name(), k)
			}
		}
	}
}
