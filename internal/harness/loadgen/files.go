package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bookrecon/bookrecon/providers"
)

// File names of a run written to a folder: the same shapes as the samples.
const (
	AttemptsFile = "attempts.jsonl"
	TruthFile    = "provider-truth.json"
	ExpectedFile = "expected.json"
)

type truthRecord struct {
	ProviderReference string  `json:"providerReference"`
	ClientReference   *string `json:"clientReference"`
	Status            string  `json:"status"`
	CreatedAt         string  `json:"createdAt"`
	Fingerprint       *string `json:"fingerprint"`
}

type expectedFile struct {
	Attempts []Expected `json:"attempts"`
}

// Write stores o in dir: the records (publish order) as JSONL, the truth in the format of
// samples/provider-truth.json, the expected outcomes in {"attempts": [...]}.
func (o Output) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	for _, r := range o.Records {
		b.Write(r)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, AttemptsFile), b.Bytes(), 0o644); err != nil {
		return err
	}
	truth := map[string][]truthRecord{}
	for p, recs := range o.Truth {
		for _, r := range recs {
			tr := truthRecord{ProviderReference: r.ProviderReference, Status: string(r.Status), CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
			if r.ClientReference != "" {
				cr := r.ClientReference
				tr.ClientReference = &cr
			}
			truth[p] = append(truth[p], tr)
		}
	}
	for name, v := range map[string]any{TruthFile: truth, ExpectedFile: expectedFile{o.Expected}} {
		j, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), j, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Read loads a run written by Write (records, truth and expected outcomes).
func Read(dir string) (Output, error) {
	var o Output
	raw, err := os.ReadFile(filepath.Join(dir, AttemptsFile))
	if err != nil {
		return o, err
	}
	seen := map[string]bool{}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		o.Records = append(o.Records, line)
		var v struct{ TenantID, EventID, BookingIntentID string }
		if err := json.Unmarshal(line, &v); err != nil {
			return o, fmt.Errorf("loadgen: %s: %w", AttemptsFile, err)
		}
		o.Keys = append(o.Keys, []byte(v.BookingIntentID))
		if !seen[v.TenantID+"/"+v.EventID] {
			seen[v.TenantID+"/"+v.EventID] = true
			o.UniqueEvents++
		}
	}
	var truth map[string][]truthRecord
	if err := readJSON(filepath.Join(dir, TruthFile), &truth); err != nil {
		return o, err
	}
	o.Truth = map[string][]providers.Record{}
	for p, recs := range truth {
		for _, r := range recs {
			at, err := time.Parse(time.RFC3339Nano, r.CreatedAt)
			if err != nil {
				return o, fmt.Errorf("loadgen: %s: %w", TruthFile, err)
			}
			rec := providers.Record{ProviderReference: r.ProviderReference, Status: providers.RecordStatus(r.Status), CreatedAt: at}
			if r.ClientReference != nil {
				rec.ClientReference = *r.ClientReference
			}
			o.Truth[p] = append(o.Truth[p], rec)
		}
	}
	var exp expectedFile
	if err := readJSON(filepath.Join(dir, ExpectedFile), &exp); err != nil {
		return o, err
	}
	o.Expected = exp.Attempts
	return o, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("loadgen: %s: %w", path, err)
	}
	return nil
}
