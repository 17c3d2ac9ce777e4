package wfstore

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/backstophq/backstop/store"
)

// MigrationTx is one transaction of a workflow store's migration run, on
// the store's own version table (the table prefix plus "wf_migrations").
type MigrationTx interface {
	// Applied returns the versions already applied, creating the version
	// table first when it is missing.
	Applied(ctx context.Context) (map[int]bool, error)
	// Apply runs m's SQL and records m's version.
	Apply(ctx context.Context, m store.Migration) error
}

// Migrate applies, inside tx and in version order, the migrations of fsys
// (files dir/NNNN_name.sql) not yet applied, and returns the versions it
// applied. Running it again applies nothing, so a store may migrate every
// time it opens.
func Migrate(ctx context.Context, tx MigrationTx, fsys fs.FS, dir string) ([]int, error) {
	ms, err := store.LoadMigrations(fsys, dir)
	if err != nil {
		return nil, err
	}
	done, err := tx.Applied(ctx)
	if err != nil {
		return nil, fmt.Errorf("wfstore: read applied migrations: %w", err)
	}
	var applied []int
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := tx.Apply(ctx, m); err != nil {
			return nil, fmt.Errorf("wfstore: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}
