package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/backstophq/backstop/store"
)

// openReadOnly is Open under ReadOnly: a pool of read-only connections
// that is both the store's reader and its (refusing) writer, after a look
// at the schema's version.
//
// SQLite reads a database in WAL mode through its -shm file, which it
// creates if it is missing: while the database's server runs, the file is
// there; once the server has shut down it is gone, and where this process
// may not create it (a directory it cannot write) the database is opened
// immutable instead. SQLite then reads it without locks, which is sound
// only while nothing writes it: no -wal file beside it says no process has
// it open.
func (s *Store) openReadOnly(ctx context.Context, path, params string) (*Store, error) {
	_, uri := ReadOnlyURI(path)
	uri += "&" + params + "&_pragma=query_only(1)"
	open := func(uri string) error {
		db, err := sql.Open("sqlite", uri)
		if err != nil {
			return fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		db.SetMaxOpenConns(4)
		s.w, s.r = db, db
		if err := s.checkSchema(ctx, path); err != nil {
			db.Close()
			return err
		}
		return nil
	}
	err := open(uri)
	if isReadOnly(err) && !exists(walFile(path)) {
		err = open(uri + "&immutable=1")
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// walFile is the -wal file beside the database path names.
func walFile(path string) string {
	if strings.HasPrefix(path, "file:") {
		if u, err := url.Parse(path); err == nil {
			if path = u.Path; path == "" {
				path = u.Opaque
			}
		}
	}
	return path + "-wal"
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// checkSchema refuses a database whose schema lacks a version this build
// knows: ReadOnly cannot migrate it.
func (s *Store) checkSchema(ctx context.Context, path string) error {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	table := s.cfg.TablePrefix + "migrations"
	versions, err := appliedVersions(ctx, s.r, table)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return fmt.Errorf("sqlite: %s holds no Backstop tables named %s*: run backstop migrate on it first", path, s.cfg.TablePrefix)
		}
		return fmt.Errorf("sqlite: read %s read-only: %w", path, err)
	}
	done := map[int]bool{}
	for _, v := range versions {
		done[v] = true
	}
	for _, m := range ms {
		if !done[m.Version] {
			return fmt.Errorf("sqlite: %s lacks schema version %d (%s), which this build needs and cannot apply read-only: "+
				"run backstop migrate on it as a user who may write it", path, m.Version, m.Name)
		}
	}
	store.WarnNewerSchema(ctx, s.cfg.Log(), "sqlite", versions, ms)
	return nil
}

// ReadOnlyURI returns the file path names and a URI that opens it
// read-only. Open takes path as a file name unless it begins with file:
// (a URI already), so a plain name's %, # and ? are escaped: unescaped,
// "o#1.db" opens (and creates) "o", and "o%41.db" the missing "oA.db".
func ReadOnlyURI(path string) (file, uri string) {
	if strings.HasPrefix(path, "file:") {
		file = strings.TrimPrefix(path, "file:")
		if u, err := url.Parse(path); err == nil {
			if file = u.Path; file == "" {
				file = u.Opaque
			}
		}
		return file, path + "?mode=ro"
	}
	return path, "file:" + strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(path) + "?mode=ro"
}
