package sqlite_test

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// A path naming a directory is refused as such: Open said the database was
// read-only ("cannot be written by this process") and a read-only open
// said "disk I/O error", which sent the operator after permissions.
func TestOpenADirectory(t *testing.T) {
	dir := t.TempDir()
	for _, opts := range [][]sqlite.Option{nil, {sqlite.ReadOnly()}} {
		s, err := sqlite.Open(context.Background(), dir, store.Config{}, opts...)
		if err == nil {
			s.Close()
			t.Fatal("opened a directory")
		}
		if !strings.Contains(err.Error(), "is a directory") || strings.Contains(err.Error(), "read-only") {
			t.Errorf("Open(a directory, %d options): %v", len(opts), err)
		}
	}
}
