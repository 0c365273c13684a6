package service_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

// TestConfigErrorsAreUsageErrors: a configuration error exits 80 with a message that names the
// flag, whether it came from the flag or from its BOOKRECON_* variable, before anything is
// dialled (the database and broker addresses lead nowhere).
func TestConfigErrorsAreUsageErrors(t *testing.T) {
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "ingester", "reconciler", "escalator", "query-api", "bookrecon")
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := []string{"BOOKRECON_DATABASE_URL=postgres://u:p@127.0.0.1:1/none", "BOOKRECON_KAFKA_BROKERS=127.0.0.1:1"}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, bin string
		env       []string
		args      []string
		want      string
	}{
		{"DurationFromVariable", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_BATCH_TIMEOUT=abc"}, nil,
			`--batch-timeout: expected duration but got "abc"`},
		{"DurationFromFlag", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp}, []string{"--batch-timeout", "abc"},
			`--batch-timeout: expected duration but got "abc"`},
		{"EmptyProvidersVariable", "ingester", []string{"BOOKRECON_PROVIDERS="}, nil,
			`--providers: is required: give the path of a file (from envar BOOKRECON_PROVIDERS="")`},
		{"ProvidersDirectory", "reconciler", []string{"BOOKRECON_PROVIDERS=" + tmp}, nil, tmp + " is a directory, not a file"},
		{"ProvidersMissing", "escalator", nil, []string{"--providers", filepath.Join(tmp, "nope.yaml")}, "nope.yaml does not exist"},
		{"QueryAPIProvidersEmpty", "query-api", []string{"BOOKRECON_PROVIDERS="}, nil, "--providers: is required"},
		{"HistoryKeyMalformed", "bookrecon", nil, []string{"attempt", "history", "--tenant", "t_1", "--key", "garbage"}, "--key must be prefix:subject:vN"},
		{"EscalationIDNotUUID", "bookrecon", nil, []string{"escalations", "show", "not-a-uuid"}, `escalation id "not-a-uuid" is not a UUID`},
		{"NegativeReconcilePoll", "reconciler", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_RECONCILE_POLL=-1s"}, nil, "--poll (BOOKRECON_RECONCILE_POLL) must be positive, got -1s"},
		{"NegativeEscalatePoll", "escalator", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_ESCALATE_POLL=-1s"}, nil, "--poll (BOOKRECON_ESCALATE_POLL) must be positive, got -1s"},
		{"BackoffMaxBelowInitial", "reconciler", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_BACKOFF_MAX=100ms"}, nil, "--max-interval (BOOKRECON_BACKOFF_MAX) 100ms is below --initial-interval"},
		{"BadProviderURL", "reconciler", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_PROVIDER_URL=::bad"}, nil, `--provider-url (BOOKRECON_PROVIDER_URL) "::bad" is not an http(s) URL`},
		{"ShortBatchTimeout", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_BATCH_TIMEOUT=-5s"}, nil, "--batch-timeout (BOOKRECON_BATCH_TIMEOUT) must be at least 1s, got -5s"},
		{"ShortRetention", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_RETENTION_DAYS=2"}, nil, "--retention-days (BOOKRECON_RETENTION_DAYS) must be at least 3, got 2"},
		{"NoBrokers", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_KAFKA_BROKERS="}, nil, "--kafka-brokers (BOOKRECON_KAFKA_BROKERS) is required"},
		// The crash failpoint exists only in a binary built with -tags failpoint (crash tests).
		{"NoFailpointFlag", "ingester", []string{"BOOKRECON_PROVIDERS=" + mp}, []string{"--failpoint", "after-db-commit:1"}, "unknown flag --failpoint"},
		{"DatabaseURLDoesNotParse", "escalator", []string{"BOOKRECON_PROVIDERS=" + mp, "BOOKRECON_DATABASE_URL=postgres://u:hunter2@127.0.0.1:abc/db"}, nil, "BOOKRECON_DATABASE_URL does not parse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := pipelinetest.RunBinary(t, 20*time.Second, filepath.Join(dir, tt.bin), append(nowhere, tt.env...), tt.args...)
			if code != 80 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 80 and %q", code, stderr, tt.want)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("stderr shows the password: %q", stderr)
			}
		})
	}
}

// TestHelpShowsNoSecret: --help of every binary shows no database password — neither the
// configured one nor the local stack's default.
func TestHelpShowsNoSecret(t *testing.T) {
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "ingester", "reconciler", "escalator", "query-api", "bookrecon")
	env := []string{"BOOKRECON_DATABASE_URL=postgres://ops:s3cret-pw@db.example:5432/prod"}
	for _, bin := range []string{"ingester", "reconciler", "escalator", "query-api", "bookrecon"} {
		stdout, stderr, code := pipelinetest.RunBinary(t, 20*time.Second, filepath.Join(dir, bin), env, "--help")
		out := stdout + stderr
		if code != 0 || !strings.Contains(out, "BOOKRECON_DATABASE_URL") {
			t.Errorf("%s --help: exit %d, output %q", bin, code, out)
		}
		for _, secret := range []string{"s3cret-pw", "bookrecon:bookrecon@"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s --help shows %q", bin, secret)
			}
		}
	}
}

// TestUsageErrorsWriteStderrOnly: on a usage error the usage goes with the error to stderr and
// stdout stays empty (TOKEN=$(bookrecon tokens add …) without --scope captured the help text),
// and a token typed where it does not belong — an argument, a flag's value — is masked
// (it was echoed: "unexpected argument bookrecon_…"); --help still writes stdout.
func TestUsageErrorsWriteStderrOnly(t *testing.T) {
	t.Parallel()
	dir := pipelinetest.BuildBinaries(t, "bookrecon")
	bin := filepath.Join(dir, "bookrecon")
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	if _, _, code := pipelinetest.RunBinary(t, 20*time.Second, bin, nil, "tokens", "init", "--file", file); code != 0 {
		t.Fatalf("tokens init: exit %d", code)
	}
	const token = "bookrecon_66YIHSY51LU0ZtxHkXrLn-dDwV9a7y5LmI8O96uwGGY"
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"NoScope", []string{"tokens", "add", "--tenant", "t_a", "--principal", "p", "--file", file}, `missing flags: --scope=S,...`},
		{"TokenAsArgument", []string{"tokens", "revoke", token, "--file", file}, "unexpected argument bookrecon_[redacted]"},
		{"TokenAsScope", []string{"tokens", "add", "--tenant", "t_a", "--principal", "p", "--scope", token, "--file", file}, `scope "bookrecon_[redacted]" is none of`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := pipelinetest.RunBinary(t, 20*time.Second, bin, nil, tt.args...)
			if code != 80 || stdout != "" || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, token) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 80, nothing on stdout, %q in stderr and no token", code, stdout, stderr, tt.want)
			}
		})
	}
	stdout, _, code := pipelinetest.RunBinary(t, 20*time.Second, bin, nil, "tokens", "add", "--help")
	if code != 0 || !strings.HasPrefix(stdout, "Usage: bookrecon tokens add") {
		t.Errorf("tokens add --help: exit %d, stdout %q; want 0 and the usage", code, stdout)
	}
}
