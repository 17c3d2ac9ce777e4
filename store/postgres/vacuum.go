package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store"
)

// The tables Vacuum looks after: those every delivered message churns.
// The outbox gets a row, a new version at the lease and a delete at the
// recording; a shallow strict stream's row is created, updated and
// deleted with each of its messages; the wake-ups are posted and
// consumed; a stream's turn row is created by its first writer and swept
// once the stream empties. So are the inbox's de-duplication records and
// the admin API's idempotency keys, each a row written and, past its
// window, swept.
func (s *Store) vacuumTables() []string {
	tables := []string{s.n.outbox, s.n.qual + "streams", s.n.qual + "stream_wakes", s.n.qual + "stream_turns",
		s.n.qual + "inbox_received", s.n.qual + "idempotency_keys"}
	if more := s.vac.more.Load(); more != nil {
		tables = append(tables, *more...)
	}
	return tables
}

// VacuumAlso adds tables of the store's database that Vacuum looks after
// beside its own, by qualified name, such as a workflow store's runs,
// tasks and attempts (wfpostgres.New adds them): a run's lease renewals
// and its tasks' state changes leave dead rows as messages do. A table
// that does not exist when Vacuum runs is passed over; a name given twice
// is kept once.
func (s *Store) VacuumAlso(tables ...string) {
	for {
		old := s.vac.more.Load()
		var list []string
		if old != nil {
			list = append(list, *old...)
		}
		for _, t := range tables {
			if !slices.Contains(list, t) {
				list = append(list, t)
			}
		}
		if s.vac.more.CompareAndSwap(old, &list) {
			return
		}
	}
}

// A table is vacuumed once its dead rows number vacuumMinDead and a tenth
// of its live rows. The first keeps a quiet deployment from vacuuming at
// all: 20,000 dead entries at the front of an index cost a claim about 60
// index pages passed over (a few tenths of a millisecond). The second keeps
// the cost of a vacuum, which reads the whole of every index, in
// proportion to what it removes on a deep backlog.
const (
	vacuumMinDead     = 20_000
	vacuumLiveDivisor = 10
)

// vacuumState is what Vacuum remembers between calls.
type vacuumState struct {
	running atomic.Bool
	// refused is set once the store found it may not vacuum a table
	// (another role owns it): Vacuum then does nothing, as autovacuum
	// must keep up on its own, which is said once in the log.
	refused atomic.Bool
	// more are the tables VacuumAlso added.
	more atomic.Pointer[[]string]
}

// Vacuum implements store.Vacuumer: it reads the busy tables' counts of
// dead and live rows from pg_stat_user_tables and runs VACUUM (SKIP_LOCKED,
// TRUNCATE false) on each past the threshold, one at a time, on a
// connection of its own with no statement_timeout (a VACUUM cancelled
// halfway would be begun again at every beat). A call while another is
// running returns at once. It never gives a table's empty trailing pages
// back (TRUNCATE false): that takes the table's ACCESS EXCLUSIVE lock,
// which writers and claims queue behind, and a VACUUM that cannot get it
// at once retries for up to 5 s before the next table's turn (sampled in
// insert-and-work over strict streams: the leader's vacuum waited there in
// 13 of 40 samples); the next inserts fill the pages again.
func (s *Store) Vacuum(ctx context.Context) ([]string, error) {
	if s.vac.refused.Load() || !s.vac.running.CompareAndSwap(false, true) {
		return nil, nil
	}
	defer s.vac.running.Store(false)
	names, err := s.vacuum(ctx)
	if err != nil {
		return names, fmt.Errorf("postgres: vacuum: %w", err)
	}
	return names, nil
}

func (s *Store) vacuum(ctx context.Context) ([]string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// The connection goes without statement_timeout (the statistics'
	// read too: a short one must not keep the vacuum from ever running),
	// and gets the session's own back (an AfterConnect may have set it:
	// RESET would lose that) before it goes back to the pool; one that
	// could not be is closed.
	var timeout string
	if err := conn.QueryRow(ctx, "SELECT current_setting('statement_timeout'), set_config('statement_timeout', '0', false)").
		Scan(&timeout, new(string)); err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(rctx, "SELECT set_config('statement_timeout', $1, false)", timeout); err != nil {
			_ = conn.Conn().Close(rctx) // the pool drops a closed connection
		}
	}()
	rows, err := conn.Query(ctx, `
		SELECT t.name, coalesce(st.n_dead_tup, 0), coalesce(st.n_live_tup, 0),
			pg_has_role(c.relowner, 'USAGE')
		FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i)
		JOIN pg_class c ON c.oid = to_regclass(t.name)
		LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid
		ORDER BY t.i`, s.vacuumTables())
	if err != nil {
		return nil, err
	}
	type table struct {
		name       string
		dead, live int64
		mayVacuum  bool
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.name, &t.dead, &t.live, &t.mayVacuum)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	var done []string
	for _, t := range list {
		if t.dead < vacuumMinDead || t.dead < t.live/vacuumLiveDivisor {
			continue
		}
		if !t.mayVacuum {
			if !s.vac.refused.Swap(true) {
				s.cfg.Log().LogAttrs(ctx, slog.LevelInfo, "backstop may not vacuum its tables (another role owns them): "+
					"autovacuum must keep up with their dead rows alone",
					slog.String("table", t.name))
			}
			return done, nil
		}
		start := time.Now()
		if _, err := conn.Exec(ctx, "VACUUM (SKIP_LOCKED, TRUNCATE false) "+t.name); err != nil {
			return done, fmt.Errorf("%s: %w", t.name, err)
		}
		done = append(done, t.name)
		s.cfg.Log().LogAttrs(ctx, slog.LevelDebug, "vacuumed", slog.String("table", t.name),
			slog.Int64("dead_rows", t.dead), slog.Int64("live_rows", t.live),
			slog.Duration("took", time.Since(start)))
	}
	return done, nil
}

var _ store.Vacuumer = (*Store)(nil)
