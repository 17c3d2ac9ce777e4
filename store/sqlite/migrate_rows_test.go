package sqlite

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// schemaAt creates a database holding the schema up to version (the
// migrations a store of that version applied), runs the statements
// written by plain SQL then, and returns its path.
func schemaAt(t *testing.T, version int, rows ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE backstop_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > version {
			break
		}
		if _, err := db.Exec(strings.ReplaceAll(m.SQL, "{{prefix}}", "backstop_")); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO backstop_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range rows {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}

func openAt(t *testing.T, path string, cfg store.Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, cfg)
	if err != nil {
		t.Fatalf("Open (migrating): %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ids read in the test's spellings.
const (
	idUpper  = "C46BD641-A2A3-4D3E-B595-41670E2D4D0A"
	idTwin   = "D2E1F7A0-0B1C-4D5E-8F90-A1B2C3D4E5F6"
	idMixed1 = "E3F2A8B1-1C2D-4E6F-9A01-B2C3D4E5F6A7"
	idMixed2 = "e3f2a8b1-1c2d-4e6f-9a01-B2C3D4E5F6A7"
)

// TestMigrationLowerCasesIDs: migration 0008 stores every outbox id in
// lower case, keeping every row: of two spellings of one id, the
// lower-case one, else the earliest, keeps it and the other gets a fresh
// id. Dead-letter entries follow their rows. From then on an id written
// in upper case is stored in lower case, and a second spelling of an id is
// a duplicate.
func TestMigrationLowerCasesIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ins := func(id, typ string) string {
		return `INSERT INTO backstop_outbox (id, destination, type) VALUES ('` + id + `', 'd', '` + typ + `')`
	}
	entry := func(id, messageID string) string {
		return `INSERT INTO backstop_dead_letters (id, message_id, failure_time) VALUES ('` + id + `', '` + messageID + `', 0)`
	}
	path := schemaAt(t, 7,
		ins(idUpper, "upper"),
		ins(idTwin, "twin-upper"), ins(strings.ToLower(idTwin), "twin-lower"),
		ins(idMixed1, "mixed-first"), ins(idMixed2, "mixed-second"),
		entry("e-upper", idUpper), entry("e-twin", idTwin), entry("e-hand", "Hand-Added-ID"),
	)
	s := openAt(t, path, store.Config{})
	byType := map[string]string{}
	rows, err := s.r.Query(`SELECT type, id FROM backstop_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ, id string
		if err := rows.Scan(&typ, &id); err != nil {
			t.Fatal(err)
		}
		if id != strings.ToLower(id) {
			t.Errorf("%s: id %s not lower-cased", typ, id)
		}
		byType[typ] = id
	}
	rows.Close()
	if len(byType) != 5 {
		t.Fatalf("rows after the migration: %v, want all 5", byType)
	}
	for typ, want := range map[string]string{"upper": strings.ToLower(idUpper), "twin-lower": strings.ToLower(idTwin),
		"mixed-first": strings.ToLower(idMixed1)} {
		if byType[typ] != want {
			t.Errorf("%s: id %s, want %s", typ, byType[typ], want)
		}
	}
	for _, typ := range []string{"twin-upper", "mixed-second"} {
		if _, err := uuid.Parse(byType[typ]); err != nil || byType[typ] == strings.ToLower(idTwin) || byType[typ] == strings.ToLower(idMixed1) {
			t.Errorf("%s: id %q, want a fresh one", typ, byType[typ])
		}
	}
	entries := map[string]string{}
	rows, err = s.r.Query(`SELECT id, message_id FROM backstop_dead_letters`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, msg string
		if err := rows.Scan(&id, &msg); err != nil {
			t.Fatal(err)
		}
		entries[id] = msg
	}
	rows.Close()
	if entries["e-upper"] != strings.ToLower(idUpper) || entries["e-twin"] != byType["twin-upper"] || entries["e-hand"] != "Hand-Added-ID" {
		t.Errorf("entries' message ids %v; want them to follow their rows (twin-upper is %s), the hand-added one kept",
			entries, byType["twin-upper"])
	}

	// from now on
	id := uuid.New()
	if _, err := s.w.ExecContext(ctx, ins(strings.ToUpper(id.String()), "later")); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Get(ctx, id); err != nil || m.Type != "later" {
		t.Fatalf("Get(%s) = %+v, %v", id, m, err)
	}
	for _, dup := range []string{id.String(), strings.ToUpper(id.String())} {
		if _, err := s.w.ExecContext(ctx, ins(dup, "dup")); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
			t.Errorf("INSERT of %s again: %v, want a UNIQUE violation", dup, err)
		}
	}
	// OR IGNORE applies to the triggers' statements too: it must not
	// leave the upper-case spelling beside the id
	if _, err := s.w.ExecContext(ctx, strings.Replace(ins(strings.ToUpper(id.String()), "dup"), "INSERT", "INSERT OR IGNORE", 1)); err == nil {
		var n int
		if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_outbox WHERE lower(id) = ?`, id.String()).Scan(&n); err != nil || n != 1 {
			t.Errorf("after INSERT OR IGNORE of the id in upper case: %d rows with the id, %v", n, err)
		}
	}
	other := strings.ToUpper(uuid.NewString())
	if _, err := s.w.ExecContext(ctx, ins(other, "other")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE OR IGNORE backstop_outbox SET id = ? WHERE type = 'other'`, strings.ToUpper(id.String())); err == nil {
		var n int
		if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_outbox WHERE lower(id) = ?`, id.String()).Scan(&n); err != nil || n != 1 {
			t.Errorf("after UPDATE OR IGNORE to the id in upper case: %d rows with the id, %v", n, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_outbox SET id = upper(id) WHERE type = 'later'`); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := s.w.QueryRowContext(ctx, `SELECT id FROM backstop_outbox WHERE type = 'later'`).Scan(&stored); err != nil || stored != id.String() {
		t.Fatalf("id after UPDATE SET id = upper(id): %q, %v; want %s", stored, err, id)
	}
	if _, err := s.w.ExecContext(ctx, entry("e-later", strings.ToUpper(id.String()))); err != nil {
		t.Fatal(err)
	}
	if err := s.w.QueryRowContext(ctx, `SELECT message_id FROM backstop_dead_letters WHERE id = 'e-later'`).Scan(&stored); err != nil || stored != id.String() {
		t.Fatalf("entry's message_id written in upper case: %q, %v; want %s", stored, err, id)
	}
}

// TestMigrationMendsLeasesWithoutExpiry: rows written before migration 0009
// with instance_id and no lease_expiry (never claimed when unordered) are
// taken as lapsed leases, and claimed.
func TestMigrationMendsLeasesWithoutExpiry(t *testing.T) {
	t.Parallel()
	path := schemaAt(t, 8,
		`INSERT INTO backstop_outbox (destination, stream, type, ordering, instance_id) VALUES
			('d', '', 't', NULL, 'ghost'), ('d', 'n', 't', 'none', 'ghost'), ('d', 's', 't', NULL, 'ghost')`)
	s := openAt(t, path, store.Config{})
	res, err := s.ProcessBatch(context.Background(), &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 3 {
		t.Fatalf("claimed %d messages, want the 3 leased without expiry", len(res.Claimed))
	}
}

// TestMigrationMendsOutOfRangeIntegers: rows written before migration 0010
// with attempts or failure_reason outside 32 bits are quarantined with
// their values mended (attempts clamped), also behind a parked head, and
// one quarantined before (its attempts never mended) is mended by the
// migration: listings, Get and the claim read every row again.
func TestMigrationMendsOutOfRangeIntegers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := schemaAt(t, 9,
		// a dead-lettered head, parking stream s
		`INSERT INTO backstop_outbox (destination, stream, type, dead_lettered_at) VALUES ('d', 's', 'head', 1)`,
		`INSERT INTO backstop_outbox (destination, stream, type, attempts) VALUES ('d', 's', 'attempts', 3000000000)`,
		`INSERT INTO backstop_outbox (destination, stream, type, failure_reason) VALUES ('d', 's', 'reason', 1099511627776)`,
		`INSERT INTO backstop_outbox (destination, type, failure_reason) VALUES ('d', 'negative reason', -1099511627776)`,
		// quarantined by an earlier version, attempts kept
		`INSERT INTO backstop_outbox (destination, type, attempts, failure_reason, dead_lettered_at)
			VALUES ('d', 'quarantined', 3000000000, 5, 1)`,
		`INSERT INTO backstop_outbox (destination, type, failure_reason, dead_lettered_at)
			VALUES ('d', 'dead reason', 1099511627776, 1)`,
		`INSERT INTO backstop_outbox (destination, type) VALUES ('d', 'good')`,
	)
	s := openAt(t, path, store.Config{})
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quarantined) != 3 || len(res.Claimed) != 1 || res.Claimed[0].Type != "good" {
		t.Fatalf("quarantined %d, claimed %+v; want 3 and the good one", len(res.Quarantined), res.Claimed)
	}
	all, err := s.ListMessages(ctx, store.MessageFilter{})
	if err != nil || len(all) != 7 {
		t.Fatalf("ListMessages: %d, %v; want all 7", len(all), err)
	}
	for _, m := range all {
		if _, err := s.Get(ctx, m.ID); err != nil {
			t.Errorf("Get %s: %v", m.Type, err)
		}
		switch m.Type {
		case "attempts", "quarantined":
			if m.Attempts != math.MaxInt32 {
				t.Errorf("%s: attempts %d, want clamped to %d", m.Type, m.Attempts, math.MaxInt32)
			}
		case "dead reason":
			if m.FailureReason != 99 {
				t.Errorf("%s: failure reason %d, want Unknown", m.Type, m.FailureReason)
			}
		}
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_outbox (destination, type, attempts) VALUES ('d', 't', 3000000000)`); err == nil ||
		!strings.Contains(err.Error(), "outbox.attempts") {
		t.Fatalf("INSERT of attempts 3e9 after the migration: %v", err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatal(err)
	}
}
