// Package samples locates the normative sample input (../shared/samples beside the repository,
// or BOOKRECON_SAMPLES) for tests, the demo and the CLI.
package samples

import (
	"errors"
	"os"
	"path/filepath"
)

// Dir returns the samples folder: $BOOKRECON_SAMPLES, else ../shared/samples next to the
// module root found by walking up from the working directory.
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
			s := filepath.Join(filepath.Dir(d), "shared", "samples")
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
