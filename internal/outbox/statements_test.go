package outbox

import (
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestStatementsPrepare prepares every statement of sql/outbox.sql against the migrated schema.
func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	pgtest.PrepareStatements(t, stmts)
}
