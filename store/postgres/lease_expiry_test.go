package postgres

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestMigrationMendsLeasesWithoutExpiry: rows written before migration
// 0016 with instance_id and no lease_expiry (never claimed when unordered)
// are taken as lapsed leases by the migration, and claimed; afterwards
// such a row is refused.
func TestMigrationMendsLeasesWithoutExpiry(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// the schema as it was before version 16
	for _, q := range []string{
		`ALTER TABLE {prefix}outbox DROP CONSTRAINT ` + s.n.prefix + `outbox_lease_has_expiry`,
		`DELETE FROM {prefix}migrations WHERE version = 16`,
		`INSERT INTO {prefix}outbox (destination, stream, type, ordering, instance_id) VALUES
			('d', '', 't', NULL, 'ghost'), ('d', 'n', 't', 'none', 'ghost'), ('d', 's', 't', NULL, 'ghost')`,
	} {
		if err := execPoison(t, s, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got := claimIDs(t, s)
	if len(got[""]) != 1 || len(got["n"]) != 1 || len(got["s"]) != 1 {
		t.Fatalf("claimed %v, want the three rows leased without expiry", got)
	}
	if err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, type, instance_id) VALUES ('d', 't', 'ghost')`); err == nil {
		t.Fatal("after the migration, a lease without expiry was accepted")
	}
	if err := execPoison(t, s, `ALTER TABLE {prefix}outbox VALIDATE CONSTRAINT `+s.n.prefix+`outbox_lease_has_expiry`); err != nil {
		t.Fatalf("validating the constraint after the migration: %v", err)
	}
}
