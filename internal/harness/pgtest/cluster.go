package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/migrations"
)

// clusterPrefix names the clusters OwnCluster creates: <prefix><pid of the test binary>-<n>.
const clusterPrefix = "bookrecon-test-"

var clusterSeq, dbSeq atomic.Int64

// Cluster is a PostgreSQL cluster of one test's own, made with Debian's postgresql-common
// (pg_createcluster): a fault test may stop it — with -m immediate, a crash that the next start
// recovers from — and start it again without touching the server every other test shares.
// Stop and Start may be called from any goroutine.
type Cluster struct {
	Version string // PostgreSQL major version, e.g. "15"
	Name    string // cluster name (pg_lsclusters)
	Port    int    // on 127.0.0.1
}

// OwnCluster creates a cluster for t — the newest installed major version, on a free port,
// with the role bookrecon (password bookrecon, superuser, as scripts/stack.sh makes it on the
// shared cluster) and password authentication on 127.0.0.1 (Debian's default pg_hba.conf) — and
// starts it. It is dropped when t ends (pg_dropcluster --stop), after its server log's tail is
// logged if t failed; clusters that a test binary which died left behind are dropped by the
// next OwnCluster. It needs root (or password-less sudo) like the fault tests that signal the
// shared server's backends, and fails t, never skips, when postgresql-common is missing (it
// skips under -short, like every helper here).
func OwnCluster(t testing.TB) *Cluster {
	t.Helper()
	SkipShort(t)
	for _, tool := range []string{"pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_lsclusters"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("pgtest: %s not found: OwnCluster needs Debian's postgresql-common and a PostgreSQL server "+
				"(apt-get install postgresql; scripts/stack.sh up installs both)", tool)
		}
	}
	ver, err := newestVersion()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dropOrphans(t)
	port := freePort(t)
	c := &Cluster{Version: ver, Name: fmt.Sprintf("%s%d-%d", clusterPrefix, os.Getpid(), clusterSeq.Add(1)), Port: port}
	// --start-conf=manual: never started at boot.
	if out, err := asRoot("pg_createcluster", ver, c.Name, "-p", strconv.Itoa(port), "--start-conf=manual"); err != nil {
		t.Fatalf("pgtest: pg_createcluster %s %s: %v\n%s", ver, c.Name, err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: cluster %s server log (tail):\n%s", c.Name, c.logTail(40))
		}
		if out, err := asRoot("pg_dropcluster", "--stop", c.Version, c.Name); err != nil {
			t.Errorf("pgtest: pg_dropcluster %s %s: %v\n%s", c.Version, c.Name, err, out)
		}
	})
	if err := c.Start(); err != nil {
		t.Fatalf("pgtest: %v\n%s", err, c.logTail(20))
	}
	sql := `CREATE ROLE bookrecon LOGIN SUPERUSER PASSWORD 'bookrecon'`
	if out, err := asPostgres("psql", "-p", strconv.Itoa(port), "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql); err != nil {
		t.Fatalf("pgtest: cluster %s: create role: %v\n%s", c.Name, err, out)
	}
	return c
}

// URL is the URL of database db in the cluster, as the role bookrecon.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://bookrecon:bookrecon@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// NewDatabase creates a migrated database in the cluster and returns its URL; it goes with
// the cluster.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("bookrecon_%d", dbSeq.Add(1))
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: cluster %s: %v", c.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" OWNER bookrecon"); err != nil {
		t.Fatalf("pgtest: cluster %s: create database: %v", c.Name, err)
	}
	u := c.URL(name)
	pool, err := postgres.Open(ctx, u, 2)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer pool.Close()
	if _, err := migrations.UpPool(ctx, pool); err != nil {
		t.Fatalf("pgtest: cluster %s: migrate: %v", c.Name, err)
	}
	return u
}

// Stop stops the cluster: with immediate, every server process exits at once without a
// checkpoint (pg_ctlcluster stop -m immediate: a crash, as far as the data is concerned);
// otherwise a fast shutdown. It returns when the server is gone.
func (c *Cluster) Stop(immediate bool) error {
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if out, err := asRoot("pg_ctlcluster", c.Version, c.Name, "stop", "-m", mode); err != nil {
		return fmt.Errorf("pgtest: pg_ctlcluster %s %s stop -m %s: %w\n%s", c.Version, c.Name, mode, err, out)
	}
	return nil
}

// Start starts the cluster (after an immediate stop, through crash recovery) and returns when
// it accepts connections.
func (c *Cluster) Start() error {
	if out, err := asRoot("pg_ctlcluster", c.Version, c.Name, "start"); err != nil {
		return fmt.Errorf("pgtest: pg_ctlcluster %s %s start: %w\n%s", c.Version, c.Name, err, out)
	}
	return nil
}

func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(fmt.Sprintf("/var/log/postgresql/postgresql-%s-%s.log", c.Version, c.Name))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// newestVersion is the newest PostgreSQL major version installed (/usr/lib/postgresql/<v>).
func newestVersion() (string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var vers []int
	for _, b := range bins {
		if v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b)))); err == nil {
			vers = append(vers, v)
		}
	}
	if len(vers) == 0 {
		return "", errors.New("no PostgreSQL server under /usr/lib/postgresql (apt-get install postgresql)")
	}
	return strconv.Itoa(slices.Max(vers)), nil
}

// dropOrphans drops the clusters of test binaries that are no longer running (killed by a
// -timeout panic or ^C before their cleanup ran).
func dropOrphans(t testing.TB) {
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	if err != nil {
		t.Fatalf("pgtest: pg_lsclusters: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], clusterPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(f[1], clusterPrefix), "-", 2)[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if out, err := asRoot("pg_dropcluster", "--stop", f[0], f[1]); err != nil {
			t.Logf("pgtest: dropping the orphaned cluster %s %s: %v\n%s", f[0], f[1], err, out)
		} else {
			t.Logf("pgtest: dropped the orphaned cluster %s %s", f[0], f[1])
		}
	}
}

// asRoot runs a postgresql-common command as root (directly, or through sudo -n); the
// cluster's server runs as its owner, postgres.
func asRoot(name string, args ...string) ([]byte, error) {
	if os.Geteuid() != 0 {
		args, name = append([]string{"-n", name}, args...), "sudo"
	}
	return combined(exec.Command(name, args...))
}

// asPostgres runs a client as the postgres user, which the cluster trusts on its socket (peer).
func asPostgres(name string, args ...string) ([]byte, error) {
	if os.Geteuid() == 0 {
		return combined(exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...))
	}
	return combined(exec.Command("sudo", append([]string{"-n", "-u", "postgres", name}, args...)...))
}

func combined(cmd *exec.Cmd) ([]byte, error) {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	cmd.Dir = "/" // readable by postgres, whatever the test's working directory

	err := cmd.Run()
	return b.Bytes(), err
}
