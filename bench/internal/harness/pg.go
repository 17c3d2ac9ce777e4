package harness

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"

	"github.com/jackc/pgx/v5"
)

// schemaPrefix starts the name of every schema the benchmark creates, so
// that leftovers of a killed run can be found and dropped.
const schemaPrefix = "backstop_bench_"

// schemaFor names the schema of case c in round r, with this process's
// id so that two runs at once do not collide; short, because River takes
// schema names of at most 46 characters.
func schemaFor(c Case, round int) string {
	h := fnv.New32a()
	h.Write([]byte(c.Name()))
	return fmt.Sprintf("%s%d_%08x_r%d", schemaPrefix, os.Getpid(), h.Sum32(), round+1)
}

// withConn runs fn on a new connection to url.
func withConn(ctx context.Context, url string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", url, err)
	}
	defer conn.Close(ctx)
	return fn(conn)
}

// createSchema creates schema, dropping any leftover of the same name.
func createSchema(ctx context.Context, url, schema string) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		id := pgx.Identifier{schema}.Sanitize()
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "CREATE SCHEMA "+id)
		return err
	})
}

// dropSchema drops schema and everything in it.
func dropSchema(ctx context.Context, url, schema string) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	})
}

// settle prepares a drain's preloaded backlog on PostgreSQL the same way
// for every system. With analyze it first runs VACUUM ANALYZE on every
// table of schema, what autovacuum does to a table that has grown on a
// server where it is on (it is off on some test servers, where no
// statistics would ever exist). Then it forces a CHECKPOINT, so that the
// preload's dirty pages are not written during the measure.
func settle(url, schema string, analyze bool) func(context.Context) error {
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
