package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// concurrentMarker begins the part of a migration file that builds
// indexes on tables that may be large: from it to the end, statements of
// the form CREATE INDEX CONCURRENTLY IF NOT EXISTS name ON table ..., one
// each, and comments.
//
// A plain CREATE INDEX holds the table's writers (the application's
// inserts into the outbox) for as long as it reads the table, about a
// second a million rows, and in the migration's one transaction until
// every later migration has run too: an outbox that keeps a week of
// delivered messages stopped its application's writes for a minute at
// an upgrade. So an index of this part is built in the transaction only
// while its table is small (Store.indexInTxUpTo: a fresh install, a test);
// otherwise it is built after the transaction commits, CONCURRENTLY, which
// lets writers go on (it waits for the transactions open when it starts to
// end, and reads the table twice). Migrate builds such an index whenever it
// finds it missing, so no later migration may drop one.
const concurrentMarker = "-- backstop:build-concurrently"

// smallTable is the heap size up to which a migration builds its table's
// index inside its transaction (Store.indexInTxUpTo's default): 64 MiB,
// a build of a few tenths of a second here.
const smallTable = 64 << 20

// migrationIndex is one index of a migration's concurrent part, its
// names as the store's prefix and schema make them.
type migrationIndex struct {
	name  string // qualified: "schema".prefix_..._idx
	table string // qualified, as the statement names it
	sql   string // the statement: CREATE INDEX CONCURRENTLY IF NOT EXISTS ...
}

// plain is the statement without CONCURRENTLY, to run in a transaction.
func (ix migrationIndex) plain() string {
	return concurrently.ReplaceAllString(ix.sql, "${1}")
}

var (
	indexStatement = regexp.MustCompile(`(?is)^CREATE\s+INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+((?:"[^"]*"|[^\s"])+)\s+ON\s+((?:"[^"]*"|[^\s"])+)\s`)
	concurrently   = regexp.MustCompile(`(?is)^(CREATE\s+INDEX\s+)CONCURRENTLY\s+`)
)

// splitMigration splits a migration's SQL, its names already filled in,
// into what runs in the migration's transaction and the indexes of its
// concurrent part, qualified with schema (an identifier, quoted).
func splitMigration(sql, schema string) (string, []migrationIndex, error) {
	at := strings.Index(sql, concurrentMarker)
	if at < 0 {
		return sql, nil, nil
	}
	var lines []string
	for _, l := range strings.Split(sql[at+len(concurrentMarker):], "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
			lines = append(lines, l)
		}
	}
	var out []migrationIndex
	for _, st := range strings.Split(strings.Join(lines, "\n"), ";") {
		st = strings.TrimSpace(st)
		if st == "" {
			continue
		}
		m := indexStatement.FindStringSubmatch(st)
		if m == nil {
			first, _, _ := strings.Cut(st, "\n")
			return "", nil, fmt.Errorf("postgres: a migration's concurrent part holds %q: only CREATE INDEX CONCURRENTLY IF NOT EXISTS statements go there", first)
		}
		name := m[1]
		if !strings.Contains(name, ".") {
			name = schema + "." + name
		}
		out = append(out, migrationIndex{name: name, table: m[2], sql: st})
	}
	return sql[:at], out, nil
}

// buildInTx builds, in the migration's transaction, the indexes of ix whose
// table is small; buildIndexes builds the others once it commits.
func (s *Store) buildInTx(ctx context.Context, tx pgx.Tx, ix []migrationIndex) error {
	for _, x := range ix {
		var size int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(pg_relation_size(to_regclass($1)), 0)`, x.table).Scan(&size); err != nil {
			return fmt.Errorf("size of %s: %w", x.table, err)
		}
		if size > s.indexInTxUpTo {
			continue
		}
		if _, err := tx.Exec(ctx, x.plain()); err != nil {
			return fmt.Errorf("index %s: %w", x.name, err)
		}
	}
	return nil
}

// buildIndexes builds, CONCURRENTLY and outside any transaction, the
// indexes of the applied migrations' concurrent parts that are missing or
// invalid: one whose build was left for after the migration's
// transaction, or one a build interrupted (a process stopped, a
// cancelled statement) left invalid, which is dropped and built again.
// One instance builds at a time (a session advisory lock, tried: another
// finds it taken and goes on, the indexes only make reads faster). A role
// that may not build them is told to run backstop migrate as the owner,
// and the store goes on without them.
func (s *Store) buildIndexes(ctx context.Context, all []migrationIndex) error {
	todo, err := s.indexesToBuild(ctx, s.pool, all)
	if err != nil || len(todo) == 0 {
		return err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: build indexes: %w", err)
	}
	clean := false
	defer func() {
		if clean {
			c.Release()
			return
		}
		// the session may hold the lock or settings of an interrupted build
		_ = c.Hijack().Close(context.WithoutCancel(ctx))
	}()
	var locked bool
	if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock("+s.n.lockKey("indexes")+")").Scan(&locked); err != nil {
		return fmt.Errorf("postgres: build indexes: %w", err)
	}
	if !locked {
		s.cfg.Log().LogAttrs(ctx, slog.LevelInfo, "another instance builds the migrations' indexes; going on without waiting",
			slog.String("store", "postgres"))
		clean = true
		return nil
	}
	// A build takes as long as the table is large: the role's or the
	// URL's statement_timeout would cut every try short.
	if _, err := c.Exec(ctx, `SET statement_timeout = 0`); err != nil {
		return fmt.Errorf("postgres: build indexes: %w", err)
	}
	if todo, err = s.indexesToBuild(ctx, c, all); err != nil { // another may have built them
		return err
	}
	for _, x := range todo {
		start := time.Now()
		s.cfg.Log().LogAttrs(ctx, slog.LevelInfo, "building an index concurrently: writers go on meanwhile",
			slog.String("store", "postgres"), slog.String("index", x.name), slog.String("table", x.table),
			slog.Bool("rebuilt", x.invalid))
		err := func() error {
			if x.invalid {
				if _, err := c.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+x.name); err != nil {
					return err
				}
			}
			_, err := c.Exec(ctx, x.sql)
			return err
		}()
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				s.cfg.Log().LogAttrs(ctx, slog.LevelWarn, "an index of the schema is missing and this role may not build it: "+
					"run backstop migrate as the tables' owner (claims and lists are slower without it)",
					slog.String("store", "postgres"), slog.String("index", x.name), slog.String("error", err.Error()))
				return nil
			}
			return fmt.Errorf("postgres: build index %s: %w", x.name, err)
		}
		s.cfg.Log().LogAttrs(ctx, slog.LevelInfo, "index built", slog.String("store", "postgres"),
			slog.String("index", x.name), slog.Duration("took", time.Since(start)))
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock("+s.n.lockKey("indexes")+")"); err != nil {
		return fmt.Errorf("postgres: build indexes: %w", err)
	}
	if _, err := c.Exec(ctx, `RESET statement_timeout`); err != nil {
		return fmt.Errorf("postgres: build indexes: %w", err)
	}
	clean = true
	return nil
}

// indexToBuild is an index buildIndexes builds; invalid when a build
// left it so.
type indexToBuild struct {
	migrationIndex
	invalid bool
}

// indexesToBuild returns the indexes of all that are missing or invalid.
func (s *Store) indexesToBuild(ctx context.Context, q querier, all []migrationIndex) ([]indexToBuild, error) {
	if len(all) == 0 {
		return nil, nil
	}
	names := make([]string, len(all))
	for i, x := range all {
		names[i] = x.name
	}
	rows, err := q.Query(ctx, `SELECT coalesce(i.indisvalid, false), i.indexrelid IS NULL
		FROM unnest($1::text[]) WITH ORDINALITY AS n(name, k)
		LEFT JOIN pg_index i ON i.indexrelid = to_regclass(n.name)
		ORDER BY n.k`, names)
	if err != nil {
		return nil, fmt.Errorf("postgres: read indexes: %w", err)
	}
	var out []indexToBuild
	k := 0
	for rows.Next() {
		var valid, missing bool
		if err := rows.Scan(&valid, &missing); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: read indexes: %w", err)
		}
		if !valid {
			out = append(out, indexToBuild{migrationIndex: all[k], invalid: !missing})
		}
		k++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read indexes: %w", err)
	}
	return out, nil
}
