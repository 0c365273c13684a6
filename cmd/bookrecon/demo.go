package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/demo"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
)

type demoCmd struct {
	Samples  string `env:"BOOKRECON_SAMPLES" help:"Samples folder (default samples/ of the repository)."`
	Database string `default:"bookrecon_demo" help:"Database the demo drops and recreates for its run (must end in _demo)."`
	Log      string `default:".stack/demo.log" help:"Where the services' JSON logs go."`
	TokenDir string `default:".stack/demo-auth" help:"Where the demo writes the query API's tokens file and its token for tenant t_globetrek (token, mode 0600): curl -H \"Authorization: Bearer $(cat .stack/demo-auth/token)\" …"`
	topics.Flags
}

// Validate refuses a database the demo must not drop (a usage error: exit 80).
func (c *demoCmd) Validate() error {
	if !strings.HasSuffix(c.Database, "_demo") {
		return fmt.Errorf("--database %q: the demo drops and recreates it, so its name must end in _demo", c.Database)
	}
	return nil
}

// demoInputs are the samples the demo reads; all must be there before it drops anything.
var demoInputs = []string{"attempts.jsonl", "manual-decisions.jsonl", "providers.yaml", "provider-truth.json", "expected.json"}

func (c *demoCmd) Run(ctx context.Context, g *Globals) (err error) {
	dir := c.Samples
	if dir == "" {
		var err error
		if dir, err = samples.Dir(); err != nil {
			return fmt.Errorf("samples folder: %w (set BOOKRECON_SAMPLES)", err)
		}
	}
	for _, f := range demoInputs {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("samples folder %s: %w (set BOOKRECON_SAMPLES or --samples)", dir, err)
		}
	}
	admin, err := g.migrateURL()
	if err != nil {
		return err
	}
	// Every precondition before anything is dropped or recreated.
	if err := demo.Preflight(ctx, demo.Options{Brokers: g.KafkaBrokers}, admin); err != nil {
		return err
	}
	migrateURL, err := recreateDB(ctx, admin, c.Database)
	if err != nil {
		return err
	}
	dbURL, err := withDatabase(g.DatabaseURL, c.Database)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kafka.Options(g.KafkaBrokers, nil, nil, "cli")...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	_, _ = adm.DeleteGroups(ctx, kafka.GroupIngester)
	tp := c.Flags.Names()
	fmt.Println("recreating topics", tp.All())
	err = topics.Recreate(ctx, adm, 1, tp)
	cl.Close()
	if err != nil {
		return err
	}
	_ = os.MkdirAll(filepath.Dir(c.Log), 0o755)
	logf, err := os.Create(c.Log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := logf.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo log %s: %w", c.Log, cerr) // the services' log lost its end
		}
	}()
	fi, _ := os.Stdout.Stat()
	live := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	fmt.Printf("bookrecon demo: samples %s, database %s, logs %s\n", dir, c.Database, c.Log)
	fmt.Println("publishing samples/attempts.jsonl rebased to now (about 82s); the report comes at 125s")
	res, err := demo.Run(ctx, demo.Options{
		Brokers: g.KafkaBrokers, DatabaseURL: dbURL, MigrateDatabaseURL: migrateURL, Pooler: postgres.Pooler(g.Pooler),
		SamplesDir: dir, Topics: tp, TokenDir: c.TokenDir, Out: os.Stdout, Live: live,
		Logger: demoLogger(logf),
	})
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.Report)
	if !res.Report.OK() {
		return errors.New("the end state differs from samples/expected.json (✗ lines above)")
	}
	fmt.Println("\nall scenarios match samples/expected.json")
	return nil
}

// withDatabase is the URL u naming database name instead.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	p.Path = "/" + name
	return p.String(), nil
}

// recreateDB drops and creates database name (through the server's maintenance database, so
// the URL may name the demo database itself; a direct session, never through a transaction
// pooler) and returns its URL. Only a name ending in _demo is accepted: the demo must never drop
// a database someone works in.
func recreateDB(ctx context.Context, adminURL, name string) (string, error) {
	if !strings.HasSuffix(name, "_demo") {
		return "", fmt.Errorf("--database %q: the demo drops and recreates it, so its name must end in _demo", name)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	maint := *u
	maint.Path = "/postgres"
	conn, err := pgx.Connect(ctx, maint.String())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// demoLogger is the demo's log file logger: JSON lines at the level BOOKRECON_LOG_LEVEL names
// (info when unset or unreadable); demo.Run adds each service's name.
func demoLogger(w io.Writer) *slog.Logger {
	level, _ := telemetry.ParseLevel(os.Getenv("BOOKRECON_LOG_LEVEL"))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
