package topics

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bookrecon/bookrecon/events"
)

// Names are the six topics of one pipeline deployment. Every service and command takes them
// from Flags (FromSuffix), so a suffixed deployment never reads or writes the v1 topics.
type Names struct {
	Attempts, AttemptsDLQ, Decisions, DecisionsDLQ, Resolutions, Escalations string
}

// Default returns the v1 topics of docs/design.md#contract-v1.
func Default() Names { return FromSuffix("") }

// FromSuffix returns the v1 topics, each followed by "." and suffix; "" gives the v1 topics.
// The suffix is not checked here: Flags.Validate does that when the command line is parsed.
func FromSuffix(suffix string) Names {
	n := Names{events.TopicAttempts, events.TopicAttemptsDLQ, events.TopicManualDecisions,
		events.TopicManualDecisionsDLQ, events.TopicResolutions, events.TopicEscalations}
	if suffix != "" {
		for _, t := range []*string{&n.Attempts, &n.AttemptsDLQ, &n.Decisions, &n.DecisionsDLQ, &n.Resolutions, &n.Escalations} {
			*t += "." + suffix
		}
	}
	return n
}

// All returns the six names: attempts, its dead letters, manual decisions, their dead letters,
// resolutions, escalations.
func (n Names) All() []string {
	return []string{n.Attempts, n.AttemptsDLQ, n.Decisions, n.DecisionsDLQ, n.Resolutions, n.Escalations}
}

// MaxNameLength is Kafka's limit on the length of a topic name.
const MaxNameLength = 249

// MaxSuffixLength is the longest suffix that keeps every topic name within MaxNameLength: the
// longest v1 name, the dot, the suffix.
const MaxSuffixLength = MaxNameLength - 1 - max(len(events.TopicAttempts), len(events.TopicAttemptsDLQ),
	len(events.TopicManualDecisions), len(events.TopicManualDecisionsDLQ), len(events.TopicResolutions), len(events.TopicEscalations))

// ErrSuffix is wrapped by every error of ValidateSuffix.
var ErrSuffix = errors.New("topic suffix")

// ValidateSuffix reports a suffix that would make a topic name Kafka refuses: a character other
// than A-Z, a-z, 0-9, '.', '_' and '-', or more than MaxSuffixLength characters.
func ValidateSuffix(suffix string) error {
	var errs []error
	if strings.ContainsFunc(suffix, func(r rune) bool { return !legal(r) }) {
		errs = append(errs, fmt.Errorf("%w %q: only A-Z, a-z, 0-9, '.', '_' and '-' are allowed in a topic name", ErrSuffix, suffix))
	}
	if len(suffix) > MaxSuffixLength {
		errs = append(errs, fmt.Errorf("%w: %d characters, at most %d (a topic name has at most %d)", ErrSuffix, len(suffix), MaxSuffixLength, MaxNameLength))
	}
	return errors.Join(errs...)
}

func legal(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-'
}

// Flags is the topic configuration of every binary and command that names a topic: embed it in
// the kong cli struct. Kong runs Validate when it parses the command line, so a bad suffix is a
// usage error (exit 80), never a topic created or written under a name nobody asked for.
type Flags struct {
	TopicSuffix string `env:"BOOKRECON_TOPIC_SUFFIX" help:"Appended as .<suffix> to every topic name (an isolated deployment or test run); empty for the v1 topics. A-Z a-z 0-9 . _ - only."`
}

// Validate checks the suffix (ValidateSuffix).
func (f Flags) Validate() error { return ValidateSuffix(f.TopicSuffix) }

// Names returns the configured topics.
func (f Flags) Names() Names { return FromSuffix(f.TopicSuffix) }
