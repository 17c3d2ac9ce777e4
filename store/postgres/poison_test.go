package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/storetest"
)

// execPoison runs q with {prefix} standing for the store's qualified
// table prefix.
func execPoison(t *testing.T, st store.Store, q string) error {
	s := st.(*Store)
	_, err := s.Pool().Exec(context.Background(), strings.ReplaceAll(q, "{prefix}", s.n.qual))
	return err
}

// checkConstraints are the outbox's CHECK constraints of migration 0002.
var checkConstraints = []string{"outbox_destination_not_empty", "outbox_type_not_empty", "outbox_status_range",
	"outbox_attempts_not_negative", "outbox_headers_object", "outbox_times_finite"}

// poison writes the rows a bug in another language could leave in a
// PostgreSQL outbox: the column types hold, but infinite times, empty
// names, out-of-range numbers and headers that are not an object do not
// decode.
var poison = &storetest.Poison{
	Exec: execPoison,
	DropChecks: func(t *testing.T, st store.Store) {
		s := st.(*Store)
		for _, c := range checkConstraints {
			if err := execPoison(t, st, `ALTER TABLE {prefix}outbox DROP CONSTRAINT `+s.n.prefix+c); err != nil {
				t.Fatal(err)
			}
		}
	},
	RefuseError: func(t *testing.T, st store.Store, text string) {
		lit := "'" + strings.ReplaceAll(text, "'", "''") + "'"
		if err := execPoison(t, st, `CREATE FUNCTION {prefix}test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.error = `+lit+` THEN RAISE EXCEPTION 'refused by the test'; END IF;
				RETURN NEW;
			END $$`); err != nil {
			t.Fatal(err)
		}
		if err := execPoison(t, st, `CREATE TRIGGER test_refuse BEFORE UPDATE ON {prefix}outbox
			FOR EACH ROW EXECUTE FUNCTION {prefix}test_refuse()`); err != nil {
			t.Fatal(err)
		}
	},
	RefuseDelete: func(t *testing.T, st store.Store, id uuid.UUID) {
		if err := execPoison(t, st, `CREATE FUNCTION {prefix}test_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF OLD.id = '`+id.String()+`' THEN RAISE EXCEPTION 'refused by the test'; END IF;
				RETURN OLD;
			END $$`); err != nil {
			t.Fatal(err)
		}
		if err := execPoison(t, st, `CREATE TRIGGER test_refuse_delete BEFORE DELETE ON {prefix}outbox
			FOR EACH ROW EXECUTE FUNCTION {prefix}test_refuse_delete()`); err != nil {
			t.Fatal(err)
		}
	},
	BadCircuits: []storetest.BadCircuit{
		{Name: "opened_at infinity", Column: "opened_at",
			SQL: `INSERT INTO {prefix}circuits (destination, open, opened_at) VALUES ('{dest}', true, 'infinity')`},
		{Name: "next_probe -infinity", Column: "next_probe",
			SQL: `INSERT INTO {prefix}circuits (destination, open, next_probe) VALUES ('{dest}', true, '-infinity')`},
		{Name: "paused_until infinity", Column: "paused_until",
			SQL: `INSERT INTO {prefix}circuits (destination, open, paused_until) VALUES ('{dest}', true, 'infinity')`},
		{Name: "probe_interval the largest bigint",
			SQL: `INSERT INTO {prefix}circuits (destination, open, probe_interval) VALUES ('{dest}', true, 9223372036854775807)`},
	},
	Oversize: []storetest.BadRow{
		{Name: "payload over 64 MiB", Column: "payload", Value: `"67108865 bytes"`,
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, payload)
				VALUES ('{dest}', '{stream}', 't', convert_to(repeat('x', 67108865), 'UTF8'))`},
		{Name: "1,100 headers", Column: "headers", Value: "holds 1100 headers",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers)
				SELECT '{dest}', '{stream}', 't', jsonb_object_agg('x-h' || g, 'v') FROM generate_series(1, 1100) g`},
		{Name: "a header over 1 MiB", Column: "headers", Value: "holds 1100005 bytes of names and values",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers)
				VALUES ('{dest}', '{stream}', 't', jsonb_build_object('x-big', repeat('v', 1100000)))`},
		{Name: "headers over 8 MiB stored", Column: "headers", Value: "bytes\" are over the largest headers",
			// stored uncompressed, so that its stored size is its size
			SQL: `ALTER TABLE {prefix}outbox ALTER COLUMN headers SET STORAGE EXTERNAL;
				INSERT INTO {prefix}outbox (destination, stream, type, headers)
				VALUES ('{dest}', '{stream}', 't', jsonb_build_object('x-big', repeat('v', 9000000)))`},
	},
	BadRows: []storetest.BadRow{
		{Name: "scheduled_for -infinity", Column: "scheduled_for", Value: `"-infinity"`, Refused: "outbox_times_finite",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, scheduled_for) VALUES ('{dest}', '{stream}', 't', '-infinity')`},
		{Name: "created_at infinity", Column: "created_at", Value: `"infinity"`, Refused: "outbox_times_finite",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, created_at) VALUES ('{dest}', '{stream}', 't', 'infinity')`},
		{Name: "lease_expiry infinity", Column: "lease_expiry", Value: `"infinity"`, Refused: "outbox_times_finite",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, instance_id, lease_expiry) VALUES ('{dest}', '{stream}', 't', 'ghost', 'infinity')`},
		{Name: "headers an array", Column: "headers", Value: `"[1, 2]"`, Refused: "outbox_headers_object",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers) VALUES ('{dest}', '{stream}', 't', '[1,2]')`},
		{Name: "headers a string", Column: "headers", Value: `"\"text\""`, Refused: "outbox_headers_object",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, headers) VALUES ('{dest}', '{stream}', 't', '"text"')`},
		{Name: "negative attempts", Column: "attempts", Value: `-1`, Refused: "outbox_attempts_not_negative",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, attempts) VALUES ('{dest}', '{stream}', 't', -1)`},
		{Name: "status out of range", Column: "status", Value: `70000`, Refused: "outbox_status_range",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, status) VALUES ('{dest}', '{stream}', 't', 70000)`},
		{Name: "negative status", Column: "status", Value: `-5`, Refused: "outbox_status_range",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type, status) VALUES ('{dest}', '{stream}', 't', -5)`},
		{Name: "empty type", Column: "type", Value: `""`, Refused: "outbox_type_not_empty",
			SQL: `INSERT INTO {prefix}outbox (destination, stream, type) VALUES ('{dest}', '{stream}', '')`},
	},
}

// TestSweepUsesTheInvalidIndex: the sweep for undecodable rows, which runs
// with every claim, reads the partial index outbox_invalid_idx, so that
// it costs nothing while every row is valid, whatever the backlog.
func TestSweepUsesTheInvalidIndex(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backlog{Pending: 5000}.load(t, s)
	ctx := context.Background()
	rows, err := s.pool.Query(ctx, "EXPLAIN "+s.life.sweep, nil, "i", sweepLimit)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), s.n.prefix+"outbox_invalid_idx") || strings.Contains(plan.String(), "Seq Scan") {
		t.Fatalf("the sweep does not read outbox_invalid_idx:\n%s", plan.String())
	}
}

// TestMigrationKeepsOldBadRows: rows written before migration 0002's
// constraints, which break them, do not make the migration fail; the
// first batch quarantines each (mending what the constraints refuse) and
// claims the good one.
func TestMigrationKeepsOldBadRows(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	pool := schemaPool(t, schema, 2)
	s, err := New(pool, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+s.n.migrations+` (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("{{T}}", s.n.qual, "{{P}}", s.n.prefix)
	if _, err := pool.Exec(ctx, r.Replace(ms[0].SQL)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.n.migrations+` (version, name) VALUES (1, $1)`, ms[0].Name); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO {prefix}outbox (destination, type, scheduled_for) VALUES ('d', 't', '-infinity')`,
		`INSERT INTO {prefix}outbox (destination, type) VALUES ('d', 'good')`,
		`INSERT INTO {prefix}outbox (destination, type, headers, attempts) VALUES ('d', 't', '[1]', -3)`,
		`INSERT INTO {prefix}outbox (destination, type, instance_id, lease_expiry) VALUES ('d', 't', 'ghost', 'infinity')`,
		`INSERT INTO {prefix}outbox (destination, type) VALUES ('d', '')`,
	} {
		if err := execPoison(t, s, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over old bad rows: %v", err)
	}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quarantined) != 4 || len(res.Claimed) != 1 || res.Claimed[0].Type != "good" {
		t.Fatalf("quarantined %d, claimed %+v; want 4 and the good one", len(res.Quarantined), res.Claimed)
	}
	// mended, the rows now pass the constraints: validating them succeeds
	for _, c := range checkConstraints {
		if err := execPoison(t, s, `ALTER TABLE {prefix}outbox VALIDATE CONSTRAINT `+s.n.prefix+c); err != nil {
			t.Fatalf("validate %s after the quarantine: %v", c, err)
		}
	}
	res, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil || len(res.Quarantined) != 0 || len(res.Claimed) != 0 {
		t.Fatalf("second batch: %+v, %v; want nothing", res, err)
	}
	if n, err := s.DLQ().Count(ctx); err != nil || n != 4 {
		t.Fatalf("dead letters: %d, %v", n, err)
	}
}

// TestSweepLeavesRowsToRegisteredHoldersOnly: an undecodable row leased by
// a registered instance is left to it (its own claim quarantines it), but
// one "leased" until the next century by a holder no relay is (an empty
// name, which a batch refuses, or a name that never heart-beat) is
// quarantined by the next claim of any instance: no instance of that name
// is ever declared dead, so the lease would otherwise hold it for a
// century.
func TestSweepLeavesRowsToRegisteredHoldersOnly(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	poison.DropChecks(t, s)
	if err := s.Heartbeat(ctx, store.Instance{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]uuid.UUID{}
	for _, holder := range []string{"other", "", "ghost"} {
		var id uuid.UUID
		if err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (destination, type, instance_id, lease_expiry)
			VALUES ('d', '', $1, now() + interval '100 years') RETURNING id`, holder).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[holder] = id
	}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "me"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[uuid.UUID]bool{}
	for _, id := range res.Quarantined {
		got[id] = true
	}
	if len(res.Quarantined) != 2 || !got[ids[""]] || !got[ids["ghost"]] {
		t.Fatalf("quarantined %v; want the rows of \"\" %s and ghost %s", res.Quarantined, ids[""], ids["ghost"])
	}
	if quarantinedEntry(ctx, t, s, ids["other"]) {
		t.Fatal("the row a registered instance leases was quarantined by another")
	}
	// once other is declared dead, its lease is released and the row swept
	if _, err := s.pool.Exec(ctx, `UPDATE `+s.n.instances+` SET last_heartbeat = now() - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	res, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "me"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quarantined) != 1 || res.Quarantined[0] != ids["other"] || res.DeadInstances != 1 {
		t.Fatalf("after other died: quarantined %v, dead instances %d; want %s and 1", res.Quarantined, res.DeadInstances, ids["other"])
	}
}
