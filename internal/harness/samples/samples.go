// Package samples locates the sample input for tests, the demo and the CLI: the repository's
// copy in samples/ (or BOOKRECON_SAMPLES), so a clone alone runs its demo and tests. The
// normative copy is ../shared/samples; TestCopyMatchesShared keeps the two equal.
package samples

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bookrecon/bookrecon/providers"
)

// Dir returns the samples folder: $BOOKRECON_SAMPLES, else samples/ at the module root found
// by walking up from the working directory.
func Dir() (string, error) {
	if d := os.Getenv("BOOKRECON_SAMPLES"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			s := filepath.Join(d, "samples")
			if _, err := os.Stat(s); err != nil {
				return "", err
			}
			return s, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("samples: go.mod not found above the working directory")
		}
	}
}

// Path returns the path of one sample file, e.g. Path("attempts.jsonl").
func Path(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, name), nil
}

// Providers loads the sample capability map, samples/providers.yaml (providers.LoadMap).
func Providers() (*providers.Map, error) {
	p, err := Path("providers.yaml")
	if err != nil {
		return nil, err
	}
	return providers.LoadMap(p)
}

// Expected is samples/expected.json.
type Expected struct {
	Attempts []struct {
		TenantID          string `json:"tenantId"`
		IdempotencyKey    string `json:"idempotencyKey"`
		Status            string `json:"status"`
		ResolutionSource  string `json:"resolutionSource"`
		ProviderReference string `json:"providerReference"`
	} `json:"attempts"`
	Escalations []struct {
		TenantID       string `json:"tenantId"`
		IdempotencyKey string `json:"idempotencyKey"`
		Reason         string `json:"reason"`
		State          string `json:"state"`
		ClosedBy       string `json:"closedBy"`
	} `json:"escalations"`
	DeadLetters []struct {
		EventID *string `json:"eventId"`
		Reason  string  `json:"reason"`
	} `json:"deadLetters"`
	Counts struct {
		UniqueValidEvents   int            `json:"uniqueValidEvents"`
		DuplicateDeliveries map[string]int `json:"duplicateDeliveries"`
		IdempotentRepeats   int            `json:"idempotentRepeats"`
		Attempts            int            `json:"attempts"`
		TerminalAttempts    int            `json:"terminalAttempts"`
		ResolutionEvents    int            `json:"resolutionEvents"`
		KeyConflicts        int            `json:"keyConflicts"`
		BlindRetries        int            `json:"blindRetries"`
		Escalations         int            `json:"escalations"`
		EscalationsClosed   int            `json:"escalationsClosed"`
		DeadLetters         int            `json:"deadLetters"`
	} `json:"counts"`
}

// LoadExpected reads an expected.json.
func LoadExpected(path string) (*Expected, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e Expected
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("samples: %s: %w", path, err)
	}
	return &e, nil
}
