package events

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// deadLetter is a verdict on a sample record, keyed by its eventId ("" for the record whose
// eventId cannot be read, the invalid-JSON one).
type deadLetter struct {
	Reason Reason
	Field  string
}

// sampleDeadLetters are the ten bad records of samples/attempts.jsonl, with the step each hits
// (docs/design.md#contract-v1). TestSampleAttempts checks the reasons against expected.json.
var sampleDeadLetters = map[string]deadLetter{
	"":           {ReasonInvalidJSON, ""},                         // truncated after eventType
	"evt_bad_02": {ReasonUnknownEventType, "eventType"},           // attempt.exploded
	"evt_bad_03": {ReasonMissingField, "tenantId"},                // no tenantId
	"evt_bad_04": {ReasonInvalidField, "operationVersion"},        // 0 (step 6 beats the v1 key, step 8)
	"evt_bad_05": {ReasonInvalidIdempotencyKey, "idempotencyKey"}, // an e-mail as subject
	"evt_bad_06": {ReasonInvalidIdempotencyKey, "idempotencyKey"}, // cancel: prefix on a BOOK
	"evt_bad_07": {ReasonUnsupportedSpecVersion, "specVersion"},   // specVersion 2
	"evt_bad_08": {ReasonUnknownProvider, "provider"},             // sim-unknown
	"evt_bad_09": {ReasonTooLarge, ""},                            // 70 KB of padding, valid JSON
	"evt_bad_10": {ReasonMissingField, "outcome"},                 // succeeded without outcome
}

func TestSampleAttempts(t *testing.T) {
	t.Parallel()

	lines := sampleLines(t, "attempts.jsonl")
	got := map[string]deadLetter{}
	var ok, started int
	for i, line := range lines {
		a, err := DecodeAttempt(line, DecodeOptions{KnownProvider: knownSampleProvider})
		if err != nil {
			ie, isInvalid := AsInvalid(err)
			if !isInvalid {
				t.Fatalf("line %d: error %v is not an *InvalidError", i+1, err)
			}
			var id struct {
				EventID string `json:"eventId"`
			}
			_ = json.Unmarshal(line, &id) // leaves "" for the invalid-JSON line
			if _, dup := got[id.EventID]; dup {
				t.Fatalf("line %d: second dead letter for eventId %q", i+1, id.EventID)
			}
			got[id.EventID] = deadLetter{ie.Reason, ie.Field}
			continue
		}
		ok++
		if _, err := CanonicalHash(line); err != nil {
			t.Errorf("line %d (%s): CanonicalHash: %v", i+1, a.EventID, err)
		}
		if a.EventType == EventStarted {
			started++
			if h, err := a.Hash(); err != nil || len(h) != 64 {
				t.Errorf("line %d (%s): Hash() = %q, %v", i+1, a.EventID, h, err)
			}
			if a.Operation.HasFingerprint() && Fingerprint(a.Operation, a.Request) == "" {
				t.Errorf("line %d (%s): no fingerprint", i+1, a.EventID)
			}
		}
	}
	if len(lines) != 75 || ok != 65 || started != 33 {
		t.Errorf("lines = %d, decoded = %d, started = %d; want 75, 65, 33", len(lines), ok, started)
	}
	if diff := cmp.Diff(sampleDeadLetters, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}

	// The reasons must be those of expected.json.
	b, err := os.ReadFile(samplesDir + "expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected struct {
		DeadLetters []struct {
			EventID *string `json:"eventId"`
			Reason  Reason  `json:"reason"`
		} `json:"deadLetters"`
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	want := map[string]Reason{}
	for _, d := range expected.DeadLetters {
		id := ""
		if d.EventID != nil {
			id = *d.EventID
		}
		want[id] = d.Reason
	}
	gotReasons := map[string]Reason{}
	for id, d := range got {
		gotReasons[id] = d.Reason
	}
	if diff := cmp.Diff(want, gotReasons); diff != "" {
		t.Errorf("reasons differ from expected.json deadLetters (-want +got):\n%s", diff)
	}
}

// TestSampleAttemptsKeepNoPersonalData: the e-mail in evt_bad_05's key never reaches the error.
func TestSampleAttemptsKeepNoPersonalData(t *testing.T) {
	t.Parallel()

	for _, line := range sampleLines(t, "attempts.jsonl") {
		_, err := DecodeAttempt(line, DecodeOptions{KnownProvider: knownSampleProvider})
		if err == nil {
			continue
		}
		for _, secret := range []string{"jane", "example.com", "sim-unknown", "exploded"} {
			if ie, _ := AsInvalid(err); strings.Contains(err.Error(), secret) || strings.Contains(ie.Detail, secret) {
				t.Errorf("error %q quotes the record", err)
			}
		}
	}
}

func TestSampleDecisions(t *testing.T) {
	t.Parallel()

	want := Decision{
		SpecVersion: 1, EventID: "dec_0001", EventType: EventDecisionRecorded,
		OccurredAt: mustTime(t, "2026-11-30T09:01:30.000Z"), TenantID: "t_globetrek",
		BookingIntentID: "bi_sc20", IdempotencyKey: "book:bi_sc20:v1", Decision: DecisionConfirmed,
		ProviderReference: "LEG-2020", Actor: "ops.agent.07",
		Reason: "verified with the property by phone", Retryable: true,
		Operation: OpBook, OperationVersion: 1, KeySubject: "bi_sc20",
	}
	lines := sampleLines(t, "manual-decisions.jsonl")
	if len(lines) != 2 {
		t.Fatalf("lines = %d, want 2", len(lines))
	}
	for i, line := range lines {
		d, err := DecodeDecision(line, DecodeOptions{KnownProvider: knownSampleProvider})
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("line %d (-want +got):\n%s", i+1, diff)
		}
	}
}

// TestDecodeHashedMatchesCanonicalHash: the hash returned with the decode is CanonicalHash of
// the record, for every valid sample line.
func TestDecodeHashedMatchesCanonicalHash(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../samples/attempts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(raw, []byte("\n")) {
		_, h, err := DecodeAttemptHashed(line, DecodeOptions{})
		if err != nil {
			continue
		}
		want, err := CanonicalHash(line)
		if err != nil || h != want {
			t.Fatalf("DecodeAttemptHashed hash %s, CanonicalHash %s (%v)", h, want, err)
		}
		n++
	}
	if n < 60 {
		t.Fatalf("only %d sample lines decoded", n)
	}
}
