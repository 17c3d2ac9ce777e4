package store

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema change of a store, read from a file
// named NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads the files dir/*.sql of fsys (a store's embedded
// migrations) in version order. A file not named NNNN_name.sql, or two
// files with one version, is an error.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	paths, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, p := range paths {
		base := strings.TrimSuffix(strings.TrimPrefix(p, dir+"/"), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("store: migration file %q is not named NNNN_name.sql", p)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("store: two migrations have version %d", out[i].Version)
		}
	}
	return out, nil
}

// WarnNewerSchema logs a warning when applied holds a version past the
// newest of ms: a newer Backstop migrated the database (a rollback, or an
// old instance beside new ones). Nothing is refused, since the versions
// only add, and a rollback must be able to start; but the operator learns
// that this binary does not know the whole schema.
func WarnNewerSchema(ctx context.Context, log *slog.Logger, storeName string, applied []int, ms []Migration) {
	if len(ms) == 0 {
		return
	}
	known, newest := ms[len(ms)-1].Version, 0
	for _, v := range applied {
		newest = max(newest, v)
	}
	if newest > known {
		log.LogAttrs(ctx, slog.LevelWarn, "the database's schema is newer than this Backstop knows: a newer version migrated it; run that version",
			slog.String("store", storeName), slog.Int("schema_version", newest), slog.Int("known_version", known))
	}
}
