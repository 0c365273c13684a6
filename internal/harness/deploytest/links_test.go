package deploytest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKafkaClientWhereNotNeeded: the outbox writer, the domain and the read-only query API link
// no Kafka client (issue 12: internal/outbox is the writer only; internal/relay publishes, and
// runs only in the services that write outbox rows, docs/decisions.md "Where relays run"). It
// asks `go list -deps` for each package's dependencies and fails on any franz-go package.
func TestNoKafkaClientWhereNotNeeded(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"internal/outbox", "internal/attempt", "internal/service", "internal/query", "cmd/query-api"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/bookrecon/bookrecon/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		var kafka []string
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "github.com/twmb/franz-go") {
				kafka = append(kafka, strings.TrimSpace(line))
			}
		}
		if len(kafka) != 0 {
			t.Errorf("%s links the Kafka client: %v", pkg, kafka)
		}
	}
}
