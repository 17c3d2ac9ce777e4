package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// SQLiteRuns lists the runs of the workflow store (wfsqlite) on st's
// database.
func SQLiteRuns(st *sqlite.Store) RunLister {
	t := st.Config().TablePrefix + "wf_runs"
	return func(ctx context.Context, f RunFilter) ([]wfstore.Run, error) {
		db := st.DB()
		q := `SELECT id, dag_id, state, reason, COALESCE(owner, ''), lease_expiry, created_at, ended_at FROM ` + t + ` WHERE 1=1`
		var args []any
		if f.Cursor != "" {
			var c int64
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
			var r wfstore.Run
			var state string
			var lease, created int64
			var ended sql.NullInt64
			if err := rows.Scan(&r.ID, &r.DAGID, &state, &r.Reason, &r.Owner, &lease, &created, &ended); err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			r.State = models.RunState(state)
			r.CreatedAt = time.UnixMilli(created).UTC()
			if lease > 0 {
				r.LeaseExpiry = time.UnixMilli(lease).UTC()
			}
			if ended.Valid {
				r.EndedAt = time.UnixMilli(ended.Int64).UTC()
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
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
			var c time.Time
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
			var ended *time.Time
			if err := rows.Scan(&r.ID, &r.DAGID, &state, &r.Reason, &r.Owner, &r.CreatedAt, &ended); err != nil {
				return nil, fmt.Errorf("admin: list runs: %w", err)
			}
			r.State = models.RunState(state)
			r.CreatedAt = r.CreatedAt.UTC()
			if ended != nil {
				r.EndedAt = ended.UTC()
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
}
