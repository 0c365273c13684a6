package service

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// ExitUsage is the exit status of a usage or configuration error (kong's convention).
const ExitUsage = 80

// usageError marks a parse failure as a usage error whatever stage of parsing found it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// ExitCode makes kong exit with ExitUsage.
func (usageError) ExitCode() int { return ExitUsage }

// ParseFlags parses os.Args and the BOOKRECON_* variables into cli with kong. Every problem — a
// malformed flag, a variable that does not parse, a missing or unusable file, a failed Validate
// hook — is printed and the process exits with ExitUsage (80), whether it came from a flag or
// from its variable (kong alone exits 1 for a variable that does not parse).
func ParseFlags(cli any, opts ...kong.Option) *kong.Context {
	p, err := kong.New(cli, opts...)
	if err != nil {
		panic(err) // the cli struct's tags are wrong: a programming error
	}
	ctx, err := p.Parse(os.Args[1:])
	if err != nil {
		// The usage goes with the error to stderr, so that stdout holds only what a command
		// prints on success (TOKEN=$(bookrecon tokens add …) never captures help text); a token
		// typed where it does not belong is not echoed back.
		p.Stdout = p.Stderr
		p.FatalIfErrorf(usageError{redacted{err}})
	}
	return ctx
}

// redacted is an error whose message has every bearer token masked (auth.Redact).
type redacted struct{ error }

func (e redacted) Error() string { return auth.Redact(e.error.Error()) }
func (e redacted) Unwrap() error { return e.error }

// File is a flag naming a file that must exist: unlike kong's existingfile, an empty value (an
// empty variable) says the flag is required, and a directory is refused by name.
type File string

// Decode implements kong.MapperValue.
func (f *File) Decode(ctx *kong.DecodeContext) error {
	var s string
	if err := ctx.Scan.PopValueInto("file", &s); err != nil {
		return err
	}
	// kong prefixes the flag's name and, for a variable, adds "(from envar …)".
	if s == "" {
		return errors.New("is required: give the path of a file")
	}
	st, err := os.Stat(s)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s does not exist", s)
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory, not a file", s)
	}
	*f = File(s)
	return nil
}

// FlagChecks collects a command line's value problems for a kong Validate hook: each names the
// flag and its variable, so the binary exits 80 with every problem at once.
type FlagChecks []error

// Positive requires d > 0.
func (f *FlagChecks) Positive(flag, env string, d time.Duration) {
	if d <= 0 {
		*f = append(*f, fmt.Errorf("--%s (%s) must be positive, got %s", flag, env, d))
	}
}

// AtLeast requires n ≥ least.
func (f *FlagChecks) AtLeast(flag, env string, n, least int) {
	if n < least {
		*f = append(*f, fmt.Errorf("--%s (%s) must be at least %d, got %d", flag, env, least, n))
	}
}

// Check adds err, when not nil.
func (f *FlagChecks) Check(err error) {
	if err != nil {
		*f = append(*f, err)
	}
}

// Err joins the problems (nil when there are none).
func (f FlagChecks) Err() error { return errors.Join(f...) }

// SharedFlags are the command-line flags the ingester, the reconciler and the escalator share (each
// embeds them in its cli struct): the database, the brokers and the capability map. Each binary
// adds its own pool bound and admin address (their BOOKRECON_<SERVICE>_ variables), and Infra
// joins them.
type SharedFlags struct {
	DatabaseURL  string   `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password."`
	MigrateURL   string   `env:"BOOKRECON_MIGRATE_DATABASE_URL" help:"Direct PostgreSQL URL for the migrations only (default the database URL; required with a transaction pooler)."`
	Pooler       string   `env:"BOOKRECON_DATABASE_POOLER" enum:"none,session,transaction" default:"none" help:"What the database URL reaches: none (direct), session or transaction (a pooler in that mode, e.g. PgBouncer)."`
	KafkaBrokers []string `env:"BOOKRECON_KAFKA_BROKERS" default:"127.0.0.1:19092" help:"Kafka seed brokers."`
	Providers    File     `env:"BOOKRECON_PROVIDERS" required:"" help:"Capability map (format of samples/providers.yaml)."`
}

// Infra is the service's Infra from f, the service's pool bound (its _DB_CONNS) and admin
// address; an empty database URL is the local stack's (postgres.DefaultURL).
func (f SharedFlags) Infra(maxDBConns int32, adminAddr string) Infra {
	return Infra{Brokers: f.KafkaBrokers, DatabaseURL: cmp.Or(f.DatabaseURL, postgres.DefaultURL), MigrateDatabaseURL: f.MigrateURL,
		Pooler: postgres.Pooler(f.Pooler), MaxDBConns: maxDBConns, AdminAddr: adminAddr}
}

// LoadProviders reads the capability map the flags name (providers.LoadMap).
func (f SharedFlags) LoadProviders() (*providers.Map, error) {
	m, err := providers.LoadMap(string(f.Providers))
	if err != nil {
		return nil, fmt.Errorf("capability map: %w", err)
	}
	return m, nil
}
