package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// SQLiteRuns lists the runs of the workflow store (wfsqlite) on st's
// database. A value written by hand that is not what its column keeps
// (text where SQLite keeps unix milliseconds, a blob or invalid UTF-8
// where it keeps text) is read past: a time as none, text made valid
// (outbox.CleanText). One such row made the whole list answer 500,
// hiding every other run.
func SQLiteRuns(st *sqlite.Store) RunLister {
	t := st.Config().TablePrefix + "wf_runs"
	return func(ctx context.Context, f RunFilter) ([]wfstore.Run, error) {
		db := st.DB()
		q := `SELECT id, dag_id, state, reason, owner, lease_expiry, created_at, ended_at FROM ` + t + ` WHERE 1=1`
		var args []any
		if f.Cursor != "" {
			// The cursor's created_at is compared as it is stored, text
			// or not, so that the page goes on from the cursor's place
			// in SQLite's order.
			var c any
			err := db.QueryRowContext(ctx, `SELECT created_at FROM `+t+` WHERE id = ?`, f.Cursor).Scan(&c)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, ErrBadCursor
			}
			if err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			q += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
			args = append(args, c, c, f.Cursor)
		}
		if f.DAGID != "" {
			q += ` AND dag_id = ?`
			args = append(args, f.DAGID)
		}
		if f.State != "" {
			q += ` AND state = ?`
			args = append(args, f.State)
		}
		q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
		args = append(args, f.Limit)
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("admin: list runs: %w", err)
		}
		defer rows.Close()
		var out []wfstore.Run
		for rows.Next() {
			var id, dag, state, reason, owner, lease, created, ended any
			if err := rows.Scan(&id, &dag, &state, &reason, &owner, &lease, &created, &ended); err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			r := wfstore.Run{ID: sqliteText(id), DAGID: sqliteText(dag), State: models.RunState(sqliteText(state)),
				Reason: sqliteText(reason), Owner: sqliteText(owner), CreatedAt: sqliteTime(created),
				EndedAt: sqliteTime(ended)}
			if l := sqliteTime(lease); l.After(time.UnixMilli(0)) {
				r.LeaseExpiry = l // 0 is the lease of a run nobody holds
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
}

// sqliteText is a text column's value as valid UTF-8 without NUL, whatever
// was written in it (sqlite.LenientText, then outbox.CleanText).
func sqliteText(v any) string { return outbox.CleanText(sqlite.LenientText(v), 0) }

// sqliteTime is a unix-millisecond column's value as a time; zero when it
// is NULL or not an integer.
func sqliteTime(v any) time.Time {
	if ms, ok := v.(int64); ok {
		return time.UnixMilli(ms).UTC()
	}
	return time.Time{}
}

// PostgresRuns lists the runs of the workflow store (wfpostgres) on st's
// database, in schema (as given to wfpostgres.WithSchema; empty for the
// search_path's).
func PostgresRuns(st *postgres.Store, schema string) RunLister {
	t := st.Config().TablePrefix + "wf_runs"
	if schema != "" {
		t = pgx.Identifier{schema}.Sanitize() + "." + t
	}
	return func(ctx context.Context, f RunFilter) ([]wfstore.Run, error) {
		pool := st.Pool()
		q := `SELECT id, dag_id, state, reason, COALESCE(owner, ''), created_at, ended_at FROM ` + t + ` WHERE true`
		var args []any
		arg := func(v any) string {
			args = append(args, v)
			return fmt.Sprintf("$%d", len(args))
		}
		if f.Cursor != "" {
			var c pgtype.Timestamptz
			err := pool.QueryRow(ctx, `SELECT created_at FROM `+t+` WHERE id = $1`, f.Cursor).Scan(&c)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, ErrBadCursor
			}
			if err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			q += ` AND (created_at, id) < (` + arg(c) + `, ` + arg(f.Cursor) + `)`
		}
		if f.DAGID != "" {
			q += ` AND dag_id = ` + arg(f.DAGID)
		}
		if f.State != "" {
			q += ` AND state = ` + arg(f.State)
		}
		q += ` ORDER BY created_at DESC, id DESC LIMIT ` + arg(f.Limit)
		rows, err := pool.Query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("admin: list runs: %w", err)
		}
		defer rows.Close()
		var out []wfstore.Run
		for rows.Next() {
			var r wfstore.Run
			var state string
			var created, ended pgtype.Timestamptz
			if err := rows.Scan(&r.ID, &r.DAGID, &state, &r.Reason, &r.Owner, &created, &ended); err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			r.State = models.RunState(state)
			r.CreatedAt, r.EndedAt = postgresTime(created), postgresTime(ended)
			out = append(out, r)
		}
		return out, rows.Err()
	}
}

// postgresTime is a timestamptz as a time; zero when it is NULL or
// infinite (written by hand: pgx cannot scan it into a time.Time, and one
// such row made the whole list answer 500).
func postgresTime(v pgtype.Timestamptz) time.Time {
	if !v.Valid || v.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return v.Time.UTC()
}
