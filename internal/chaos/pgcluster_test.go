package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
)

// cluster is a PostgreSQL server of the test's own: initdb into a
// temporary directory, the server on a free loopback port. Unlike the
// machine's shared server, it can be crashed and started again.
type cluster struct {
	t    testing.TB
	bin  string // the directory of initdb and postgres
	dir  string // owned by the server's user: data/, the socket, the log
	port int
	cred *syscall.Credential // the server's user when the test runs as root
	cmd  *exec.Cmd
	done chan struct{}
}

// newCluster creates and starts a private cluster, or skips (fails under
// CI=true) when the machine has no PostgreSQL server binaries.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	bin, err := serverBinDir()
	if err != nil {
		unavailable(t, err)
	}
	c := &cluster{t: t, bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(t, fmt.Errorf("running as root, and no postgres user to run the server as: %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parent is private to this user, and the server
	// may run as another.
	c.dir, err = os.MkdirTemp("", "backstop-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(c.dir) })
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	initdb := c.command(filepath.Join(bin, "initdb"), "-D", c.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	c.port = freePort(t)
	c.start()
	t.Cleanup(c.stop)
	return c
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := "a private PostgreSQL cluster cannot be made here: " + err.Error()
	if testenv.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// serverBinDir finds initdb and postgres: pg_config's bindir, else the
// newest of Debian's /usr/lib/postgresql/*/bin.
func serverBinDir() (string, error) {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(found) - 1; i >= 0; i-- {
		dirs = append(dirs, found[i])
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no directory holds both initdb and postgres (pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

// command runs name as the server's user, in a process group of its own
// (so that a crash can kill the server and every backend at once).
func (c *cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

// URL is the cluster's postgres database, with params added.
func (c *cluster) URL(params string) string {
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	if params != "" {
		u += "&" + params
	}
	return u
}

// start runs the server and waits until it accepts connections (after
// crash recovery, when it was crashed); it returns how long that took.
// Commits wait for the disk (fsync and synchronous_commit as shipped).
func (c *cluster) start() time.Duration {
	c.t.Helper()
	began := time.Now()
	log, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.cmd = c.command(filepath.Join(c.bin, "postgres"), "-D", c.data(), "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dir,
		"-c", "max_connections=80", "-c", "shared_buffers=64MB", "-c", "autovacuum=off")
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		log.Close()
		c.t.Fatalf("start the private PostgreSQL: %v", err)
	}
	done := make(chan struct{})
	c.done = done
	cmd := c.cmd
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.URL(""))
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			return time.Since(began)
		}
		cancel()
		select {
		case <-done:
			c.t.Fatalf("the private PostgreSQL exited while starting: %s", tail(filepath.Join(c.dir, "server.log")))
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the private PostgreSQL did not accept connections within 60 s: %v; %s", err, tail(filepath.Join(c.dir, "server.log")))
		}
		<-time.After(50 * time.Millisecond)
	}
}

// exec runs sql on the cluster's postgres database, on a connection of
// its own.
func (c *cluster) exec(ctx context.Context, sql string) {
	c.t.Helper()
	conn, err := pgx.Connect(ctx, c.URL(""))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
}

// crash kills the server and all its backends at once with SIGKILL, as a
// power cut would take the processes: what they held in shared memory
// (WAL not yet written out, among it asynchronous commits) is gone, and
// the next start replays the WAL on disk.
func (c *cluster) crash() {
	c.t.Helper()
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("crash the private PostgreSQL: %v", err)
	}
	<-c.done
	// Backends are children of the postmaster, in its group: wait until
	// none is left, or the next start finds their shared memory in use.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-c.cmd.Process.Pid, 0) == nil {
		if time.Now().After(deadline) {
			c.t.Fatal("the private PostgreSQL's backends outlived SIGKILL by 10 s")
		}
		<-time.After(10 * time.Millisecond)
	}
}

// stop shuts the server down fast (SIGINT) at the end of the test.
func (c *cluster) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}
