package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// openStore opens the store a --db value names: sqlite:PATH or a
// postgres:// URL. Both come out migrated (SQLite migrates as it opens;
// PostgreSQL under its advisory lock, so several processes may start at
// once).
func openStore(ctx context.Context, db string, sc store.Config) (store.Store, error) {
	switch {
	case strings.HasPrefix(db, "sqlite:"):
		path := strings.TrimPrefix(db, "sqlite:")
		if path == "" {
			return nil, fmt.Errorf("--db %q: sqlite: needs a path, such as sqlite:./backstop.db", db)
		}
		return sqlite.Open(ctx, path, sc)
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		st, err := postgres.Open(ctx, withConnectTimeout(db), sc)
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(ctx); err != nil {
			st.Close()
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("--db %q: want sqlite:PATH or a postgres:// URL", redactDB(db))
}

// checkTables refuses a database that holds tables but not Backstop's
// under prefix: an operator command run on it with a wrong --table-prefix
// (or --db) created a second, empty set of tables beside the real ones and
// showed an empty store. An empty or new database is left to openStore,
// which creates the tables, so that a first `backstop enqueue --db
// sqlite:new.db` works.
func checkTables(ctx context.Context, db, prefix string) error {
	outbox := prefix + "outbox"
	var ours, others int
	switch {
	case strings.HasPrefix(db, "sqlite:"):
		// The store opens a plain PATH as a file name: the check must read
		// that file, not the one its %, # or ? would name in a URI, or it
		// passes another program's database.
		file, uri := sqlite.ReadOnlyURI(strings.TrimPrefix(db, "sqlite:"))
		if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
			return nil // openStore creates it, or says why it cannot
		}
		conn, err := sql.Open("sqlite", uri)
		if err != nil {
			return nil
		}
		defer conn.Close()
		err = conn.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE name = ?), count(*) FROM sqlite_master WHERE type = 'table'`,
			outbox).Scan(&ours, &others)
		if err != nil {
			return nil // not a database openStore can read either: it says so
		}
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		conn, err := pgx.Connect(ctx, withConnectTimeout(db))
		if err != nil {
			return nil
		}
		defer conn.Close(ctx)
		// The schema is found by its name as it is: a cast to regnamespace
		// reads the name as SQL, folding "Upper" to upper and failing,
		// and a failed check refused nothing.
		err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE c.relname = $1), count(*) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()`, outbox).Scan(&ours, &others)
		if err != nil {
			return nil
		}
	default:
		return nil
	}
	if ours == 0 && others > 0 {
		return fmt.Errorf("--db %s holds %d tables, none of them %s: is --table-prefix (serve's store.table_prefix) %q right? "+
			"Run backstop migrate --db ... to add Backstop's tables to this database", redactDB(db), others, outbox, prefix)
	}
	return nil
}

// defaultConnectTimeout bounds a connection's set-up when the URL does not
// (connect_timeout, in seconds). pgx waits for ever by default: serve
// started against a database that accepted the connection and never
// answered hung without a word.
const defaultConnectTimeout = "10"

// withConnectTimeout adds connect_timeout to a postgres:// URL that has
// none. It appends it to the query as written: encoding the query again
// turned a space (%20, as in options=-c%20search_path%3D...) into a '+',
// which pgx keeps as a '+'.
func withConnectTimeout(db string) string {
	u, err := url.Parse(db)
	if err != nil {
		return db // pgx says what is wrong with it
	}
	if u.Query().Has("connect_timeout") {
		return db
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "connect_timeout=" + defaultConnectTimeout
	return u.String()
}
