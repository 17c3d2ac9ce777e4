package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// --db sqlite:PATH in a directory that does not exist (a typo) says so. It
// was taken for a database this user may not write, opened read-only, and
// reported as "read ... read-only: unable to open database file (14)".
func TestDBInAMissingDirectorySaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-such-dir")
	out, err := cli(t, "--db", "sqlite:"+filepath.Join(dir, "b.db"), "dlq", "list")
	if err == nil {
		t.Fatalf("no error:\n%s", out)
	}
	msg := err.Error()
	if strings.Contains(msg, "read-only") || !strings.Contains(msg, dir) || !strings.Contains(msg, "no such file or directory") {
		t.Errorf("error %q does not say the directory %s is missing", msg, dir)
	}
	if strings.Contains(out, "read-only") {
		t.Errorf("printed %q", out)
	}
}
