package ingest

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestGroupMovedOn(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kerr.IllegalGeneration, true},
		{kerr.UnknownMemberID, true},
		{fmt.Errorf("commit: %w", kerr.RebalanceInProgress), true},
		{kerr.FencedInstanceID, true},
		{kerr.CoordinatorNotAvailable, false},
		{kerr.NotCoordinator, false},
		{kerr.UnknownServerError, false},
		{kerr.GroupAuthorizationFailed, false},
		{context.DeadlineExceeded, false},
	} {
		if got := groupMovedOn(c.err); got != c.want {
			t.Errorf("groupMovedOn(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
