package escalate_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them (goleak).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
