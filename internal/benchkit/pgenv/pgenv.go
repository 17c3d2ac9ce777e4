// Package pgenv prepares the PostgreSQL schemas benchmark cases run in:
// each case gets a fresh schema, dropped after it, and a drain's preloaded
// backlog is settled the same way for every system before it is timed.
package pgenv

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// withConn runs fn on a new connection to url.
func withConn(ctx context.Context, url string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", url, err)
	}
	defer conn.Close(ctx)
	return fn(conn)
}

// Create creates schema, dropping any leftover of the same name.
func Create(ctx context.Context, url, schema string) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		id := pgx.Identifier{schema}.Sanitize()
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "CREATE SCHEMA "+id)
		return err
	})
}

// Drop drops schema and everything in it.
func Drop(ctx context.Context, url, schema string) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	})
}

// Settle prepares a drain's preloaded backlog on PostgreSQL the same way
// for every system. With analyze it first runs VACUUM ANALYZE on every
// table of schema, what autovacuum does to a table that has grown on a
// server where it is on (it is off on some test servers, where no
// statistics would ever exist). Then it forces a CHECKPOINT, so that the
// preload's dirty pages are not written during the measure.
func Settle(url, schema string, analyze bool) func(context.Context) error {
	return func(ctx context.Context) error {
		return withConn(ctx, url, func(c *pgx.Conn) error {
			if analyze {
				rows, err := c.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
				if err != nil {
					return err
				}
				tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return err
				}
				for _, t := range tables {
					if _, err := c.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, t}.Sanitize()); err != nil {
						return err
					}
				}
			}
			_, err := c.Exec(ctx, "CHECKPOINT")
			return err
		})
	}
}

// Checkpoint forces a CHECKPOINT, so that the WAL and dirty pages an
// earlier case left are written before the next case starts, not during
// it: a case that writes gigabytes of WAL (a drain, insert-and-work)
// triggered checkpoints whose writes slowed the commits of the light case
// after it (latency, single-row enqueue), halving the raw single-row
// insert's rate from one run to the next.
func Checkpoint(ctx context.Context, url string) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "CHECKPOINT")
		return err
	})
}
