package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// The operator commands with --db work on a store whose tables have
// another prefix (serve's store.table_prefix) when told it: they saw an
// empty store, and enqueue wrote into tables no serve reads.
func TestDBCommandsTakeTheTablePrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	st, err := sqlite.Open(context.Background(), path, store.Config{TablePrefix: "myapp_"})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "hook", Type: "order.created"}
	if err := st.Enqueue(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	out := mustCLI(t, "--db", "sqlite:"+path, "--table-prefix", "myapp_", "messages", "list")
	if !strings.Contains(out, m.ID.String()) {
		t.Fatalf("messages list with --table-prefix myapp_ does not show %s:\n%s", m.ID, out)
	}
	if _, err := cli(t, "--db", "sqlite:"+path, "--table-prefix", "My-App", "messages", "list"); err == nil ||
		!strings.Contains(err.Error(), "--table-prefix") {
		t.Fatalf("a bad --table-prefix: %v, want an error naming it", err)
	}
}
