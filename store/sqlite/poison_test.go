package sqlite_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/store/storetest"
)

func init() { harness.Poison = poison }

// exec runs q on the store's database with {prefix} filled in.
func exec(t *testing.T, st store.Store, q string) error {
	s := st.(*sqlite.Store)
	_, err := s.DB().ExecContext(context.Background(), strings.ReplaceAll(q, "{prefix}", s.Config().TablePrefix))
	return err
}

// poison writes the rows a bug in another language could leave in a
// SQLite outbox: SQLite stores any value in any column.
var poison = &storetest.Poison{
	Exec: exec,
	DropChecks: func(t *testing.T, st store.Store) {
		s := st.(*sqlite.Store)
		ctx := context.Background()
		rows, err := s.DB().QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?`,
			s.Config().TablePrefix+"outbox_check_%")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		rows.Close()
		if len(names) == 0 {
			t.Fatal("no check triggers to drop")
		}
		for _, n := range names {
			if _, err := s.DB().ExecContext(ctx, `DROP TRIGGER `+n); err != nil {
				t.Fatal(err)
			}
		}
	},
	RefuseError: func(t *testing.T, st store.Store, text string) {
		if err := exec(t, st, `CREATE TRIGGER {prefix}test_refuse BEFORE UPDATE OF error ON {prefix}outbox
			WHEN NEW.error = '`+strings.ReplaceAll(text, "'", "''")+`'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
			t.Fatal(err)
		}
	},
	RefuseDelete: func(t *testing.T, st store.Store, id uuid.UUID) {
		if err := exec(t, st, `CREATE TRIGGER {prefix}test_refuse_delete BEFORE DELETE ON {prefix}outbox
			WHEN OLD.id = '`+id.String()+`'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
			t.Fatal(err)
		}
	},
	BadCircuits: []storetest.BadCircuit{
		{Name: "opened_at text", Column: "opened_at",
			SQL: `INSERT INTO {prefix}circuits (destination, open, opened_at) VALUES ('{dest}', 1, 'yesterday')`},
		{Name: "next_probe real", Column: "next_probe",
			SQL: `INSERT INTO {prefix}circuits (destination, open, next_probe) VALUES ('{dest}', 1, 1.5)`},
		{Name: "paused_until text", Column: "paused_until",
			SQL: `INSERT INTO {prefix}circuits (destination, open, paused_until) VALUES ('{dest}', 1, 'tomorrow')`},
		{Name: "probe_interval_ms text", Column: "probe_interval_ms",
			SQL: `INSERT INTO {prefix}circuits (destination, open, probe_interval_ms) VALUES ('{dest}', 1, 'abc')`},
		{Name: "probe_interval_ms the largest integer",
			SQL: `INSERT INTO {prefix}circuits (destination, open, probe_interval_ms) VALUES ('{dest}', 1, 9223372036854775807)`},
		{Name: "destination NULL", Column: "destination", Skipped: true, Value: "NULL",
			SQL: `INSERT INTO {prefix}circuits (destination, open) VALUES (NULL, 1)`},
		// A blob is another key than the text the store writes: this row
		// read as a second, closed circuit of "good", and no write of the
		// store's (TakeProbe, CloseCircuit) could ever match it.
		{Name: "destination a blob spelling another's", Column: "destination", Skipped: true, Value: "x'676f6f64'",
			SQL: `INSERT INTO {prefix}circuits (destination, open) VALUES (CAST('good' AS BLOB), 0)`},
	},
	Oversize: []storetest.BadRow{
		{Name: "payload over 64 MiB", Column: "payload", Value: `"67108865 bytes"`,
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, payload) VALUES ('{dest}', '{stream}', 't', zeroblob(67108865))`},
		{Name: "1,100 headers", Column: "headers", Value: "holds 1100 headers",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers)
				WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1100)
				SELECT '{dest}', '{stream}', 't', json_group_object('x-h' || n, 'v') FROM g`},
		{Name: "a header over 1 MiB", Column: "headers", Value: "holds 1100005 bytes of names and values",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers)
				VALUES ('{dest}', '{stream}', 't', json_object('x-big', printf('%.1100000c', 'v')))`},
		{Name: "headers over 8 MiB stored", Column: "headers", Value: `"9000012 bytes"`,
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers)
				VALUES ('{dest}', '{stream}', 't', '{"x-big":"' || hex(zeroblob(4500000)) || '"}')`},
	},
	BadRows: []storetest.BadRow{
		{Name: "status abc", Column: "status", Value: `"abc"`, Refused: "outbox.status",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, status) VALUES ('{dest}', '{stream}', 't', 'abc')`},
		{Name: "status out of range", Column: "status", Value: `70000`, Refused: "outbox.status",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, status) VALUES ('{dest}', '{stream}', 't', 70000)`},
		{Name: "attempts x", Column: "attempts", Value: `"x"`, Refused: "outbox.attempts",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, attempts) VALUES ('{dest}', '{stream}', 't', 'x')`},
		{Name: "negative attempts", Column: "attempts", Value: `-1`, Refused: "outbox.attempts",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, attempts) VALUES ('{dest}', '{stream}', 't', -1)`},
		{Name: "attempts above 32 bits", Column: "attempts", Value: `3000000000`, Refused: "outbox.attempts",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, attempts) VALUES ('{dest}', '{stream}', 't', 3000000000)`},
		{Name: "failure_reason above 32 bits", Column: "failure_reason", Value: `1099511627776`, Refused: "outbox.failure_reason",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, failure_reason) VALUES ('{dest}', '{stream}', 't', 1099511627776)`},
		{Name: "created_at yesterday", Column: "created_at", Value: `"yesterday"`, Refused: "outbox.created_at",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, created_at) VALUES ('{dest}', '{stream}', 't', 'yesterday')`},
		{Name: "text scheduled_for", Column: "scheduled_for", Value: `"2025-01-01 00:00:00"`, Refused: "outbox.scheduled_for",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, scheduled_for) VALUES ('{dest}', '{stream}', 't', '2025-01-01 00:00:00')`},
		{Name: "text lease_expiry", Column: "lease_expiry", Value: `"soon"`, Refused: "outbox.lease_expiry",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, instance_id, lease_expiry) VALUES ('{dest}', '{stream}', 't', 'ghost', 'soon')`},
		{Name: "real created_at", Column: "created_at", Value: `1.5`, Refused: "outbox.created_at",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, created_at) VALUES ('{dest}', '{stream}', 't', 1.5)`},
		{Name: "headers an array", Column: "headers", Value: `"[1,2]"`, Refused: "outbox.headers",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers) VALUES ('{dest}', '{stream}', 't', '[1,2]')`},
		{Name: "empty type", Column: "type", Value: `""`, Refused: "outbox.type",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type) VALUES ('{dest}', '{stream}', '')`},
		{Name: "blob type", Column: "type", Value: `x'0102'`, Refused: "outbox.type",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type) VALUES ('{dest}', '{stream}', x'0102')`},
		{Name: "failure_reason text", Column: "failure_reason", Value: `"bad"`, Refused: "outbox.failure_reason",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, failure_reason) VALUES ('{dest}', '{stream}', 't', 'bad')`},
	},
}
