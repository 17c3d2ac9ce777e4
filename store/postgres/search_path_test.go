package postgres

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestPlainSQLWorksFromAnotherSearchPath: a store migrated through its
// pool's search_path (no WithSchema) puts its tables in that schema; an
// application of another language that names the outbox with its schema,
// on a connection whose search_path does not reach it, must still be able
// to insert ordered and unordered messages, deliver them and fail them: the
// triggers behind those statements name their tables with the schema the
// migration ran in.
//
// "upgraded" stands for a store migrated before 0015, whose functions name
// their tables bare: 0015 must mend them.
func TestPlainSQLWorksFromAnotherSearchPath(t *testing.T) {
	t.Run("fresh", func(t *testing.T) { testPlainSQLFromAnotherSearchPath(t, false) })
	t.Run("upgraded", func(t *testing.T) { testPlainSQLFromAnotherSearchPath(t, true) })
}

func testPlainSQLFromAnotherSearchPath(t *testing.T, upgraded bool) {
	ctx := context.Background()
	schema := newSchema(t)
	s, err := New(schemaPool(t, schema, 2), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if upgraded {
		// The functions as 0003 and 0010 left them, before version 15.
		for _, q := range []string{
			`CREATE OR REPLACE FUNCTION backstop_outbox_order() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				INSERT INTO backstop_streams AS s (destination, stream) VALUES (NEW.destination, NEW.stream)
				ON CONFLICT (destination, stream) DO UPDATE SET ready = true WHERE NOT s.ready;
				NEW.seq := nextval('backstop_outbox_seq_seq');
				RETURN NEW;
			END $$`,
			`CREATE OR REPLACE FUNCTION backstop_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF EXISTS (SELECT 1 FROM backstop_waiters) THEN
					PERFORM pg_notify('backstop_outbox', d.destination) FROM (SELECT DISTINCT destination FROM new_rows) AS d;
				END IF;
				RETURN NULL;
			END $$`,
			`DELETE FROM backstop_migrations WHERE version = 15`,
		} {
			if _, err := s.pool.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := schemaPool(t, "public", 1)
	outbox := schema + ".backstop_outbox"
	for _, q := range []string{
		`INSERT INTO ` + outbox + ` (destination, stream, type) VALUES ('d', 's', 't'), ('d', 's', 't'), ('d', '', 't')`,
		`INSERT INTO ` + outbox + ` (destination, stream, type, ordering) VALUES ('d', 'n', 't', 'none')`,
		`UPDATE ` + outbox + ` SET attempts = 1, instance_id = NULL WHERE stream = 's'`,
		`DELETE FROM ` + outbox + ` WHERE seq = (SELECT min(seq) FROM ` + outbox + ` WHERE stream = 's')`,
		`DELETE FROM ` + outbox + ` WHERE stream = 's'`,
	} {
		if _, err := other.Exec(ctx, q); err != nil {
			t.Fatalf("%s\nfrom search_path public: %v", q, err)
		}
	}
	got := claimIDs(t, s)
	if len(got[""]) != 1 || len(got["n"]) != 1 || len(got["s"]) != 0 {
		t.Fatalf("claimed %v, want the unordered and the 'none' message", got)
	}
}
