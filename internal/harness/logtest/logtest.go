// Package logtest holds what tests need to read the logs of code running in goroutines.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use (slog handlers of several goroutines write to
// it) whose String returns everything written so far.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
