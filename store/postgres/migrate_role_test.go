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
	owner, err := New(schemaPool(t, schema, 2), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
