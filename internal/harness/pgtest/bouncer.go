package pgtest

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BouncerPoolSize is the number of server connections the PgBouncer of Bouncer keeps per
// database and user: fewer than any one service's own pool, so that the services share it.
const BouncerPoolSize = 3

// Bouncer starts a PgBouncer of t's own in transaction mode (pool_mode = transaction,
// default_pool_size = BouncerPoolSize) in front of the server of dbURL, on a free port of
// 127.0.0.1, and returns dbURL pointed at it: same database, user and password. It stops when
// t ends (before the database is dropped). Debian's pgbouncer is run directly, as nobody when
// the test runs as root (PgBouncer refuses root). Without pgbouncer the test fails.
func Bouncer(t testing.TB, dbURL string) string {
	t.Helper()
	SkipShort(t)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			t.Fatal("pgtest: pgbouncer not found: install pgbouncer (scripts/stack.sh up installs it)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: bouncer: %v", err)
	}
	user := u.User.Username()
	pw, _ := u.User.Password()
	// Not t.TempDir: its parents are private to the test's user, and PgBouncer runs as nobody
	// when the test is root.
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
server_round_robin = 1
logfile = %s
pidfile = %s
`, u.Hostname(), cmp.Or(u.Port(), "5432"), port, filepath.Join(dir, "userlist.txt"), BouncerPoolSize,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	for name, body := range map[string]string{
		"pgbouncer.ini": ini,
		// The password lets PgBouncer log in to the server (SCRAM needs it in clear).
		"userlist.txt": quote(user) + " " + quote(pw) + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "nobody"}, args...)
	}
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = out.Close() }() // the child keeps its own descriptor; nothing written here
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logs := func() string {
		e, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
		b, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		return string(e) + string(b)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown
		var waitErr error                       // a SIGTERM exit status is expected
		select {
		case waitErr = <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			waitErr = <-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer exited (%v); log:\n%s", waitErr, logs())
		}
	})
	pu := *u
	pu.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	bouncer := pu.String()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("pgtest: pgbouncer exited: %v\n%s", err, logs())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, bouncer)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return bouncer
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: pgbouncer on port %d does not answer: %v\n%s", port, err, logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
