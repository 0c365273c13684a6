package escalate

import (
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestStatementsPrepare prepares every statement of sql/*.sql against the migrated schema.
func TestStatementsPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	pgtest.PrepareStatements(t, statements)
}
