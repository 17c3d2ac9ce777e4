package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadOnlyDatabase: an operator whose user may read a server's SQLite
// database but not write it (file and directory owned by the service's
// user) can inspect it with --db; commands that would change it are
// refused, and the file is left as it was. Before, every --db command
// first migrated, and failed with "attempt to write a readonly database".
func TestReadOnlyDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// a directory others may enter, for the binary and the database
	dir, err := os.MkdirTemp("", "backstop-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(dir) })
	bin := filepath.Join(dir, "backstop")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "b.db")
	db := "sqlite:" + path
	if out, err := exec.Command(bin, "enqueue", "--db", db, "--destination", "orders", "--type", "order.created").CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	// the -wal and -shm files are gone once the writer closed: the case
	// where SQLite needs to create -shm and may not
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	before := digest(t, path)

	// as a user who may not write them: nobody when this runs as root,
	// which file modes do not stop
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("messages", "list", "--db", db)
	if err != nil || !strings.Contains(out, "order.created") || !strings.Contains(out, "read-only") {
		t.Fatalf("messages list on a database this user may not write: %v\n%s", err, out)
	}
	if out, err := run("stats", "--db", db); err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	out, err = run("enqueue", "--db", db, "--destination", "orders", "--type", "t")
	if err == nil || !strings.Contains(out, "read-only") {
		t.Fatalf("enqueue on a read-only database: %v\n%s, want a refusal saying it is read-only", err, out)
	}
	if after := digest(t, path); !bytes.Equal(before, after) {
		t.Fatal("the database changed under read-only commands")
	}
}

func digest(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
