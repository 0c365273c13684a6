package check

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A fresh broker answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists; CI saw
// `bookrecon check --wait` exit 1 on it. A retriable error is measured again; a permanent one
// is returned at once; a retriable one still failing at the bound is returned then.
func TestWaitSettledRetriesRetriableErrors(t *testing.T) {
	settled := Progress{}
	lagging := Progress{ConsumerLag: 2}
	cases := []struct {
		name     string
		results  []error // per measurement; nil means a Progress from progress
		progress []Progress
		wait     time.Duration
		wantErr  error
		wantN    int
	}{
		{"RetriableThenSettled", []error{kerr.CoordinatorNotAvailable, kerr.CoordinatorLoadInProgress, nil, nil},
			[]Progress{{}, {}, settled, settled}, time.Second, nil, 4},
		{"PermanentAtOnce", []error{kerr.GroupAuthorizationFailed}, []Progress{{}}, time.Second, kerr.GroupAuthorizationFailed, 1},
		// kerr counts it retriable, but a missing input topic is a wrong name: no wait mends it.
		{"UnknownTopicAtOnce", []error{fmt.Errorf("check: end offsets: %w", kerr.UnknownTopicOrPartition)}, []Progress{{}}, time.Second, kerr.UnknownTopicOrPartition, 1},
		{"RetriableAtTheBound", []error{nil, kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable},
			[]Progress{lagging, {}, {}, {}, {}}, 35 * time.Millisecond, kerr.CoordinatorNotAvailable, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			measure := func(context.Context) (Progress, error) {
				i := min(n, len(c.results)-1)
				n++
				return c.progress[i], c.results[i]
			}
			p, err := waitSettled(t.Context(), measure, WaitOptions{Wait: c.wait, Poll: 10 * time.Millisecond})
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if c.wantN > 0 && n != c.wantN {
				t.Errorf("measured %d times, want %d", n, c.wantN)
			}
			if c.wantErr == nil && p != settled {
				t.Errorf("progress = %+v, want settled", p)
			}
		})
	}
}
