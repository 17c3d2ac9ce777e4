package postgres

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// dmlRole creates a role that may read and write the tables of schema
// but not create anything in it (an application's role, the tables owned
// by another), and returns a pool whose sessions take that role.
func dmlRole(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	a := admin(t)
	role := pgx.Identifier{"backstop_dml_" + strings.ToLower(rand.Text()[:12])}.Sanitize()
	sch := pgx.Identifier{schema}.Sanitize()
	if _, err := a.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if _, err := a.Exec(ctx, `GRANT USAGE ON SCHEMA `+sch+` TO `+role+`;
		GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+sch+` TO `+role+`;
		GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA `+sch+` TO `+role); err != nil {
		t.Fatal(err)
	}
	pool := schemaPool(t, schema, 2)
	cfg := pool.Config()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+role)
		return err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// A store whose role may use Backstop's tables but not change the schema
// (the tables migrated by their owner) migrates, finding nothing to
// apply, and works: Migrate created its version table IF NOT EXISTS,
// which PostgreSQL refuses without CREATE on the schema even when the
// table exists, so serve and every --db command failed at start with
// "create migrations table: permission denied for schema". A migration
// such a role cannot apply says what it needs.
func TestMigrateWithoutTheRightToChangeTheSchema(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	migratedOn(t, schemaPool(t, schema, 2)) // by the schema's owner
	s, err := New(dmlRole(t, schema), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate by a role without DDL rights on a migrated schema: %v", err)
	}
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 5}})
	if err != nil || len(r.Claimed) != 1 {
		t.Fatalf("claimed %v (%v), want the message", r, err)
	}

	_, schemaOld := schemaAt(t, LatestSchemaVersion()-1, store.Config{})
	s, err = New(dmlRole(t, schemaOld), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "42501") || !strings.Contains(err.Error(), "may change the schema") {
		t.Fatalf("Migrate by a role without DDL rights on an old schema: %v, want an error saying what it needs", err)
	}
}

// An application's role granted the tables before migration 0030 created
// stream_turns (GRANT ... ON ALL TABLES covers the tables there at the
// time) keeps writing to ordered streams: 0030 grants it on stream_turns
// what it holds on streams, and INSERT on the wake-ups.
func TestWriterRoleGrantedBeforeTheTurnTableKeepsWriting(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	owner := migratedOn(t, schemaPool(t, schema, 2))
	// The schema as version 29 left it, with the role granted then.
	if _, err := owner.pool.Exec(ctx, `DROP TABLE `+owner.n.qual+`stream_turns;
		DELETE FROM `+owner.n.qual+`migrations WHERE version = 30`); err != nil {
		t.Fatal(err)
	}
	app, err := New(dmlRole(t, schema), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "d", Stream: "s", Type: "t"}
	if err := app.Enqueue(ctx, m); err != nil {
		t.Fatalf("an ordered write by the application's role after 0030: %v", err)
	}
	r, err := app.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Claimed) != 1 || r.Claimed[0].ID != m.ID {
		t.Fatalf("claimed %v, want the message", r.Claimed)
	}
	if _, err := app.SweepStreamTurns(ctx, 10); err != nil {
		t.Fatalf("the sweep by the application's role: %v", err)
	}
}
