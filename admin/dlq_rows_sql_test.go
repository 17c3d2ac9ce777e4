package admin_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// rawExec runs q (with %s for the dead letters' table) on st's database.
func rawExec(t *testing.T, st store.Store, q string, args ...any) {
	t.Helper()
	switch s := st.(type) {
	case *sqlite.Store:
		q = strings.ReplaceAll(q, "%s", "backstop_dead_letters")
		if _, err := s.DB().Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	case *postgres.Store:
		q = strings.ReplaceAll(q, "%s", "backstop_dead_letters")
		if _, err := s.Pool().Exec(t.Context(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestDLQRowAlteredBySQL: one dead-letter entry whose row was changed
// with plain SQL (metadata that is not a JSON object, a time out of JSON's
// range or infinite, text in a number column, a NULL id on SQLite) made
// GET /v1/dlq answer 500 for every entry, broke the pages after it, and
// failed bulk replay, resolve and delete (so the operator could not even
// delete it by filter). The entry is now shown with what could be read and
// Metadata[store.UndecodableKey] naming the rest.
func TestDLQRowAlteredBySQL(t *testing.T) {
	for _, c := range []struct {
		name       string
		sqlite, pg string
	}{
		{"metadata not an object", `UPDATE %s SET metadata = '[1,2]' WHERE id = $1`, `UPDATE %s SET metadata = '[1,2]' WHERE id = $1`},
		{"metadata garbage", `UPDATE %s SET metadata = 'not json' WHERE id = $1`, `UPDATE %s SET metadata = '"x"' WHERE id = $1`},
		{"headers garbage", `UPDATE %s SET headers = 'not json' WHERE id = $1`, `UPDATE %s SET headers = '[1]' WHERE id = $1`},
		{"failure_time far future", `UPDATE %s SET failure_time = 253402300800000 * 10 WHERE id = $1`, `UPDATE %s SET failure_time = '20000-01-01' WHERE id = $1`},
		{"failure_time infinity", `UPDATE %s SET failure_time = 'abc' WHERE id = $1`, `UPDATE %s SET failure_time = 'infinity' WHERE id = $1`},
		{"first_failure_time -infinity", `UPDATE %s SET first_failure_time = -9223372036854775808 WHERE id = $1`, `UPDATE %s SET first_failure_time = '-infinity' WHERE id = $1`},
		{"attempts text", `UPDATE %s SET attempts = 'many' WHERE id = $1`, `UPDATE %s SET attempts = -7 WHERE id = $1`},
		{"reason unknown", `UPDATE %s SET reason = 4242, failure_reason = 'Mystery' WHERE id = $1`, `UPDATE %s SET reason = 4242, failure_reason = 'Mystery' WHERE id = $1`},
		{"payload null", `UPDATE %s SET payload = NULL WHERE id = $1`, `UPDATE %s SET payload = NULL WHERE id = $1`},
		{"replayed odd", `UPDATE %s SET replayed = 'yes' WHERE id = $1`, `UPDATE %s SET resolved_at = 'infinity' WHERE id = $1`},
		{"seq text", `UPDATE %s SET seq = 'x' WHERE id = $1`, `UPDATE %s SET seq = -1 WHERE id = $1`},
		{"error blob invalid utf8", `UPDATE %s SET error_message = X'ff00fe' WHERE id = $1`, `UPDATE %s SET error_message = repeat('x', 5000000) WHERE id = $1`},
		{"id null", `UPDATE %s SET id = NULL WHERE id = $1`, `UPDATE %s SET message_id = 'not-a-uuid' WHERE id = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			stores(t, func(t *testing.T, st store.Store) {
				a := newAPI(t, st)
				ids := park(t, a, 5, "billing", errorhandling.ReasonTransportUnavailable, "fp", time.Now().Add(-time.Minute))
				q := c.pg
				if _, ok := st.(*sqlite.Store); ok {
					q = strings.ReplaceAll(c.sqlite, "$1", "?")
				}
				rawExec(t, st, q, ids[2])
				l, err := a.rd.DeadLetters(a.ctx, url.Values{})
				if err != nil {
					t.Fatalf("list: %v\n%s", err, a.logs)
				}
				shown := 0
				for _, e := range l.Items {
					if e.Metadata[store.UndecodableKey] != nil {
						shown++
					}
				}
				if len(l.Items) != 5 || shown > 1 {
					t.Errorf("list: %d items, %d marked undecodable; want 5, at most the altered one", len(l.Items), shown)
				}
				// Pages of two go through every entry once.
				seen, cursor := map[string]int{}, ""
				for p := 0; p < 10; p++ {
					v := url.Values{"limit": {"2"}}
					if cursor != "" {
						v.Set("cursor", cursor)
					}
					l, err := a.rd.DeadLetters(a.ctx, v)
					if err != nil {
						t.Fatalf("page %d: %v", p, err)
					}
					for _, e := range l.Items {
						seen[e.ID]++
					}
					if cursor = l.NextCursor; cursor == "" {
						break
					}
				}
				for _, id := range ids {
					if seen[id] != 1 && !(c.name == "id null" && id == ids[2]) {
						t.Errorf("pages of two list entry %s %d times", id, seen[id])
					}
					if _, err := a.rd.DeadLetter(a.ctx, id); err != nil && id != ids[2] {
						t.Errorf("show of an untouched entry: %v", err)
					}
				}
				if c.name != "id null" {
					e, err := a.rd.DeadLetter(a.ctx, ids[2])
					if err != nil {
						t.Errorf("show of the altered entry: %v", err)
					}
					t.Logf("altered entry shown: %v", e.Metadata[store.UndecodableKey])
				}
				if _, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, DryRun: true}); err != nil {
					t.Errorf("bulk replay dry run: %v", err)
				}
				res, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
				if err != nil || res.Count < 4 {
					t.Errorf("bulk replay: %d, %v; want at least the 4 untouched entries", res.Count, err)
				}
				// A second bulk replay sends nothing again.
				if res, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}}); err != nil || res.Count != 0 {
					t.Errorf("second bulk replay: %d, %v; want 0", res.Count, err)
				}
				if _, err := a.op.Bulk(a.ctx, "delete", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}}); err != nil {
					t.Errorf("bulk delete: %v", err)
				}
				if t.Failed() {
					t.Log(a.logs.String())
				}
			})
		})
	}
}
