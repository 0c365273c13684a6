package idempotency

import (
	"testing"

	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	logging.Disable() // go-redis logs every refused dial; the Limiter's own log is what is tested
	goleak.VerifyTestMain(m)
}
