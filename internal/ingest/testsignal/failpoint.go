package testsignal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Failpoint kinds (BOOKRECON_FAILPOINT of cmd/ingester built with the failpoint tag).
const (
	// FailAfterDBCommit fires after a batch's database commit, before its offset commit:
	// the batch is durable but will be redelivered.
	FailAfterDBCommit = "after-db-commit"
	// FailMidBatch fires inside a batch's open transaction, after some of its records were
	// applied: the transaction must roll back as a whole.
	FailMidBatch = "mid-batch"
)

// Failpoint is a point where a crash test has the ingester kill its own process. It is parsed
// from "after-db-commit:N" (after the Nth batch's database commit) or "mid-batch:N:M" (after M
// records of the Nth batch were applied, before record M+1). Batches are counted from 1 per
// transaction attempt; a mid-batch failpoint whose Nth batch has M records or fewer fires in
// the first later batch that has more.
type Failpoint struct {
	Kind  string
	Batch int // N, from 1
	After int // M, mid-batch only
}

// ParseFailpoint parses spec; the empty spec is an error (no failpoint is "no Install").
func ParseFailpoint(spec string) (Failpoint, error) {
	parts := strings.Split(spec, ":")
	nums := make([]int, 0, 2)
	for _, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Failpoint{}, fmt.Errorf("failpoint %q: %q is not a count", spec, p)
		}
		nums = append(nums, n)
	}
	switch {
	case parts[0] == FailAfterDBCommit && len(nums) == 1 && nums[0] >= 1:
		return Failpoint{Kind: FailAfterDBCommit, Batch: nums[0]}, nil
	case parts[0] == FailMidBatch && len(nums) == 2 && nums[0] >= 1:
		return Failpoint{Kind: FailMidBatch, Batch: nums[0], After: nums[1]}, nil
	}
	return Failpoint{}, errors.New("failpoint must be after-db-commit:N or mid-batch:N:M with N ≥ 1")
}

// Install sets s's signals so that kill runs once, at the failpoint. kill is expected not to
// return (cmd/ingester sends its own process SIGKILL); the signals chain any signal already set.
func (f Failpoint) Install(d *Ingester, kill func()) {
	var mu sync.Mutex
	batches, fired := 0, false
	fire := func() {
		if !fired {
			fired = true
			kill()
		}
	}
	switch f.Kind {
	case FailAfterDBCommit:
		prev := d.AfterDBCommit
		d.AfterDBCommit = func() {
			mu.Lock()
			defer mu.Unlock()
			if batches++; batches == f.Batch {
				fire()
			}
			if prev != nil {
				prev()
			}
		}
	case FailMidBatch:
		prev := d.BeforeRecord
		d.BeforeRecord = func(i int) {
			mu.Lock()
			defer mu.Unlock()
			if i == 0 {
				batches++
			}
			if batches >= f.Batch && i == f.After {
				fire()
			}
			if prev != nil {
				prev(i)
			}
		}
	}
}
