package topics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/internal/topics"
)

func TestFromSuffix(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		suffix string
		want   topics.Names
	}{
		{"", topics.Names{"booking.attempts.v1", "booking.attempts.dlq.v1", "booking.manual-decisions.v1",
			"booking.manual-decisions.dlq.v1", "booking.resolutions.v1", "booking.escalations.v1"}},
		{"staging_2", topics.Names{"booking.attempts.v1.staging_2", "booking.attempts.dlq.v1.staging_2", "booking.manual-decisions.v1.staging_2",
			"booking.manual-decisions.dlq.v1.staging_2", "booking.resolutions.v1.staging_2", "booking.escalations.v1.staging_2"}},
	} {
		if diff := cmp.Diff(tt.want, topics.FromSuffix(tt.suffix)); diff != "" {
			t.Errorf("FromSuffix(%q) (-want +got):\n%s", tt.suffix, diff)
		}
		if diff := cmp.Diff(tt.want, (topics.Flags{TopicSuffix: tt.suffix}).Names()); diff != "" {
			t.Errorf("Flags{%q}.Names() (-want +got):\n%s", tt.suffix, diff)
		}
	}
	if diff := cmp.Diff([]string{"booking.attempts.v1", "booking.attempts.dlq.v1", "booking.manual-decisions.v1",
		"booking.manual-decisions.dlq.v1", "booking.resolutions.v1", "booking.escalations.v1"}, topics.Default().All()); diff != "" {
		t.Errorf("Default().All() (-want +got):\n%s", diff)
	}
}

func TestValidateSuffix(t *testing.T) {
	t.Parallel()
	if topics.MaxSuffixLength != 217 { // 249 - 1 - len("booking.manual-decisions.dlq.v1")
		t.Errorf("MaxSuffixLength = %d, want 217", topics.MaxSuffixLength)
	}
	longest := strings.Repeat("a", topics.MaxSuffixLength)
	for _, n := range topics.FromSuffix(longest).All() {
		if len(n) > topics.MaxNameLength {
			t.Errorf("%d-character topic name with the longest suffix", len(n))
		}
	}
	for _, tt := range []struct {
		suffix string
		want   string // "" valid
	}{
		{"", ""},
		{"ci-4711.run_2", ""},
		{longest, ""},
		{longest + "a", "topic suffix: 218 characters, at most 217 (a topic name has at most 249)"},
		{"a/b", `topic suffix "a/b": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed in a topic name`},
		{"a b", `topic suffix "a b": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed in a topic name`},
		{"é", `topic suffix "é": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed in a topic name`},
	} {
		err := topics.ValidateSuffix(tt.suffix)
		if (topics.Flags{TopicSuffix: tt.suffix}).Validate() == nil != (err == nil) {
			t.Errorf("Flags{%.20q}.Validate() disagrees with ValidateSuffix", tt.suffix)
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateSuffix(%.20q) = %v, want nil", tt.suffix, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want || !errors.Is(err, topics.ErrSuffix)):
			t.Errorf("ValidateSuffix(%.20q) = %v, want %s (ErrSuffix)", tt.suffix, err, tt.want)
		}
	}
}
