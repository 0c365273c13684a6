package idempotency

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// TestMain silences go-redis (it logs every refused dial; the Limiter's own log is what is
// tested) and, under -short, skips the Examples that need PostgreSQL: an example cannot skip
// itself, so they are added to -test.skip, saying so.
func TestMain(m *testing.M) {
	logging.Disable()
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "idempotency: ExampleGuard_Transactional and ExampleGuard_TwoPhase skipped under -short: they need PostgreSQL (BOOKRECON_DATABASE_URL)")
		skip := "^ExampleGuard_(Transactional|TwoPhase)$"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
