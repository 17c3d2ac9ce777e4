package main

import (
	"context"
	"fmt"
	"strings"

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
		st, err := postgres.Open(ctx, db, sc)
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(ctx); err != nil {
			st.Close()
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("--db %q: want sqlite:PATH or a postgres:// URL", db)
}
