//go:build !failpoint

package main

import (
	"context"
	"log/slog"
)

// failpointFlags is empty in the production binary: it has no --failpoint flag and reads no
// BOOKRECON_FAILPOINT (failpoint.go, built with -tags failpoint, has them).
type failpointFlags struct{}

// arm returns ctx: the production binary arms no failpoint.
func (failpointFlags) arm(ctx context.Context, _ *slog.Logger) (context.Context, error) {
	return ctx, nil
}
