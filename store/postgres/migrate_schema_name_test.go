package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
)

// A search_path schema whose name holds a ' or a $ (which the migrations
// cannot carry: they name the schema inside string literals and
// dollar-quoted function bodies) is refused by name, saying what to do;
// Migrate failed on a syntax error of migration 0002. A name with upper
// case, a space, a dot or a double quote is migrated.
func TestMigrateNamesASchemaItCannotUse(t *testing.T) {
	ctx := context.Background()
	a := admin(t)
	for _, name := range []string{`it's`, `a$$b`, `Odd "Sch.ema"`} {
		schema := name + " " + strings.TrimPrefix(newSchema(t), "t_") // unique
		ident := pgx.Identifier{schema}.Sanitize()
		if _, err := a.Exec(ctx, `CREATE SCHEMA `+ident); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := a.Exec(context.Background(), `DROP SCHEMA `+ident+` CASCADE`); err != nil {
				t.Errorf("drop schema %s: %v", ident, err)
			}
		})
		cfg, err := pgxpool.ParseConfig(testURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = ident
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s, err := New(pool, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Migrate(ctx)
		if strings.ContainsAny(name, `'$`) {
			if err == nil || !strings.Contains(err.Error(), schema) || !strings.Contains(err.Error(), "WithSchema") {
				t.Errorf("Migrate in schema %q: %v, want a refusal naming it", schema, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Migrate in schema %q: %v", schema, err)
		}
	}
}
