package admin_test

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
)

// TestBreakersFromTheStoreReadPastBadRows: a server with no relay of its
// own (the CLI with --db) lists the circuits the store keeps. Rows written
// by hand with a time SQLite keeps as text, no destination, or a name of
// invalid UTF-8 and control characters made GET /v1/breakers answer 500,
// hiding the circuit the fleet holds open. The fleet's circuits are listed,
// the bad rows read past, and every name is valid JSON text.
func TestBreakersFromTheStoreReadPastBadRows(t *testing.T) {
	st := openSQLite(t)
	a := newAPI(t, st, func(c *admin.Config) { c.Breakers = nil })
	if _, err := st.OpenCircuit(a.ctx, "billing", "relay-a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := st.PauseDestination(a.ctx, "audit", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO backstop_circuits (destination, open, opened_at) VALUES ('by-hand', 1, 'yesterday')`,
		`INSERT INTO backstop_circuits (destination, open) VALUES (NULL, 1)`,
		`INSERT INTO backstop_circuits (destination, open, opened_by) VALUES (CAST(X'FF3C623E1B5B33316D' AS TEXT), 1, X'FE')`,
	} {
		if _, err := st.DB().ExecContext(a.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	list, err := a.rd.Breakers(a.ctx)
	if err != nil {
		t.Fatalf("GET /v1/breakers: %v", err)
	}
	got := map[string]string{}
	for _, b := range list.Items {
		got[b.Destination] = b.State
	}
	want := map[string]string{"billing": "open", "audit": "paused", "by-hand": "open", "\ufffd<b>\x1b[31m": "open"}
	if len(got) != len(want) {
		t.Fatalf("breakers %q, want %q", got, want)
	}
	for d, s := range want {
		if got[d] != s {
			t.Errorf("breaker %q = %q, want %q (all: %q)", d, got[d], s, got)
		}
	}
}
