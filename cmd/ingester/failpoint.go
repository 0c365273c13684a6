//go:build failpoint

package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
)

// failpointFlags is the crash tests' flag, in a binary built with -tags failpoint only
// (internal/ingest's TestCrashPoints builds it so); the production binary has no such flag.
type failpointFlags struct {
	Failpoint string `env:"BOOKRECON_FAILPOINT" hidden:"" help:"Crash tests only: after-db-commit:N or mid-batch:N:M kills the process with SIGKILL there."`
}

// arm returns ctx carrying the failpoint's test signals (testsignal.Failpoint), or ctx itself
// without a failpoint.
func (f failpointFlags) arm(ctx context.Context, log *slog.Logger) (context.Context, error) {
	if f.Failpoint == "" {
		return ctx, nil
	}
	fp, err := testsignal.ParseFailpoint(f.Failpoint)
	if err != nil {
		return ctx, err
	}
	log.Warn("failpoint armed", "failpoint", f.Failpoint)
	sig := testsignal.From(ctx)
	fp.Install(&sig, func() {
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // SIGKILL: no deferred work, no offset commit, no group leave
		select {}
	})
	return testsignal.With(ctx, sig), nil
}
