package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// loadResolvedEntries writes n dead-lettered messages with one entry each
// (ids e000001…, in dead-letter order), ANALYZEs both tables, then
// resolves every entry: the statistics say no entry is resolved, as right
// after a bulk resolve before autoanalyze.
func loadResolvedEntries(tb testing.TB, s *Store, n int) {
	tb.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO ` + s.n.outbox + ` (destination, type, status, attempts, dead_lettered_at)
			SELECT 'd', 'e', 1 | 32768, 3, now() FROM generate_series(1, $1)`,
		`INSERT INTO ` + s.n.deadLetters + ` (id, message_id, destination, type, failure_time)
			SELECT 'e' || lpad(seq::text, 6, '0'), id::text, destination, type, now() + seq * interval '1 ms'
			FROM ` + s.n.outbox,
		`ANALYZE ` + s.n.outbox,
		`ANALYZE ` + s.n.deadLetters,
		`UPDATE ` + s.n.deadLetters + ` SET status = 'resolved', resolved_at = now()`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{n}
		}
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			tb.Fatalf("load: %v", err)
		}
	}
}

// firstEntryIDs returns the ids of the first n entries left, in
// dead-letter order.
func firstEntryIDs(tb testing.TB, s *Store, n int) []string {
	tb.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT id FROM `+s.n.deadLetters+` ORDER BY failure_time, id LIMIT $1`, n)
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType string     `json:"Node Type"`
	JoinType string     `json:"Join Type"`
	Relation string     `json:"Relation Name"`
	Parent   string     `json:"Parent Relationship"`
	Subplan  string     `json:"Subplan Name"`
	Plans    []planNode `json:"Plans"`
}

// scansInLoops returns the sequential scans of a table whose name ends in
// table that the plan runs once per row of something else: under the
// inner side of a nested loop, or in a correlated (not hashed) subplan.
func scansInLoops(n planNode, table string, looped bool) []string {
	var out []string
	if looped && n.NodeType == "Seq Scan" && strings.HasSuffix(n.Relation, table) {
		out = append(out, n.Relation)
	}
	for _, c := range n.Plans {
		l := looped || (n.NodeType == "Nested Loop" && c.Parent == "Inner") ||
			(c.Parent == "SubPlan" && !strings.HasPrefix(c.Subplan, "hashed"))
		out = append(out, scansInLoops(c, table, l)...)
	}
	return out
}

// explainJSON returns PostgreSQL's plan for sql with args.
func explainJSON(t *testing.T, s *Store, sql string, args ...any) (planNode, string) {
	t.Helper()
	var raw string
	if err := s.pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain: %v: %s", err, raw)
	}
	return plans[0].Plan, raw
}

// TestDeleteEntriesPlanNeverScansPerEntry checks, with statistics that say
// no entry is resolved while all are, that a bulk delete of resolved
// entries, a single delete and a purge's page never read the dead letters
// once per deleted entry: whether another entry parks a message is asked
// of the message index.
func TestDeleteEntriesPlanNeverScansPerEntry(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	loadResolvedEntries(t, s, 20_000)
	q := s.dlq
	ids := firstEntryIDs(t, s, 500)
	for _, c := range []struct {
		name, where string
		args        []any
	}{
		{"bulk delete of resolved entries", deleteSomeWhere, []any{ids, string(dlq.StatusResolved)}},
		{"bulk delete", deleteSomeWhere, []any{ids, ""}},
		{"delete", deleteOneWhere, []any{ids[0]}},
		{"purge before", purgePageWhere(`failure_time < $1`), []any{time.Now().Add(time.Hour)}},
		{"purge of resolved entries", purgePageWhere(`status = 'resolved'`), nil},
	} {
		plan, raw := explainJSON(t, s, q.deleteSQL(c.where), c.args...)
		if scans := scansInLoops(plan, "dead_letters", false); len(scans) > 0 {
			t.Errorf("%s: the plan scans %v once per entry:\n%s", c.name, scans, raw)
		}
		if !strings.Contains(raw, s.n.prefix+"dead_letters_message_idx") {
			t.Errorf("%s: the plan does not use the message index:\n%s", c.name, raw)
		}
	}

	// What the statement does is unchanged: the resolved entries go, with
	// their messages (dead-lettered, parked by them alone).
	done, err := q.DeleteEntries(context.Background(), ids, dlq.StatusResolved)
	if err != nil || len(done) != len(ids) {
		t.Fatalf("DeleteEntries = %d entries, %v; want %d", len(done), err, len(ids))
	}
	var msgs int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+s.n.outbox).Scan(&msgs); err != nil {
		t.Fatal(err)
	}
	if msgs != 20_000-len(ids) {
		t.Errorf("%d messages left, want %d", msgs, 20_000-len(ids))
	}
}

// BenchmarkDeleteResolvedPage times a page of 500 resolved entries deleted
// (dlq delete --status resolved) and a single delete, at 40,000 entries
// whose statistics say none is resolved.
//
//	go test -run '^$' -bench DeleteResolvedPage -benchtime 5x ./store/postgres/
func BenchmarkDeleteResolvedPage(b *testing.B) {
	s, err := openTest(b, store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	loadResolvedEntries(b, s, 40_000)
	ctx := context.Background()
	b.Run("page=500", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ids := firstEntryIDs(b, s, 500)
			b.StartTimer()
			done, err := s.dlq.DeleteEntries(ctx, ids, dlq.StatusResolved)
			if err != nil || len(done) != len(ids) {
				b.Fatalf("DeleteEntries = %d, %v", len(done), err)
			}
		}
	})
	b.Run("one", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ids := firstEntryIDs(b, s, 1)
			b.StartTimer()
			if err := s.dlq.Delete(ctx, ids[0]); err != nil {
				b.Fatal(fmt.Errorf("Delete: %w", err))
			}
		}
	})
}
