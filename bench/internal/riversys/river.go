// Package riversys runs River (github.com/riverqueue/river) under the
// benchmark, on PostgreSQL through riverpgxv5 or on SQLite through
// riversqlite, migrated with rivermigrate, with a no-op worker and either
// the settings of River's own benchmark or River's defaults (settings.go).
package riversys

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// Args are a benchmark job's arguments: the message, as its JSON fields.
type Args struct {
	N int64 `json:"n"`
	S int64 `json:"s"`
	T int64 `json:"t"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return "bench" }

// System is River under test. Its client is generic in the driver's
// transaction type, so the methods go through the closures client sets.
type System struct {
	settings  Settings
	completed atomic.Int64
	handler   atomic.Pointer[scenario.Handler]
	client    clientOps
	closeDB   func()
}

var _ scenario.System = (*System)(nil)

// clientOps is what the benchmark needs of a *river.Client[TTx].
type clientOps struct {
	insert     func(ctx context.Context, args river.JobArgs) error
	insertMany func(ctx context.Context, params []river.InsertManyParams) error
	start      func(ctx context.Context) error
	stop       func(ctx context.Context) error
	subscribe  func(cfg *river.SubscribeConfig) (<-chan *river.Event, func())
}

// Open migrates River's tables in env with rivermigrate and returns a
// client with settings set. The client is not started.
func Open(ctx context.Context, env scenario.Env, set Settings, logger *slog.Logger) (*System, error) {
	s := &System{settings: set}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, j *river.Job[Args]) error {
		h := s.handler.Load()
		if h == nil {
			return fmt.Errorf("riversys: job worked before Start")
		}
		return (*h)(ctx, scenario.Msg{N: j.Args.N, Stream: j.Args.S, T: j.Args.T})
	}))
	cfg := set.config(workers, logger)
	switch env.Store {
	case scenario.Postgres:
		pool, err := pgxpool.New(ctx, env.URL)
		if err != nil {
			return nil, err
		}
		s.closeDB = pool.Close
		cfg.Schema = env.Schema
		if err := open(ctx, s, riverpgxv5.New(pool), cfg, env.Schema, logger); err != nil {
			pool.Close()
			return nil, err
		}
	case scenario.SQLite:
		db, err := openSQLite(filepath.Join(env.Dir, "river.db"))
		if err != nil {
			return nil, err
		}
		s.closeDB = func() { _ = db.Close() }
		if err := open(ctx, s, riversqlite.New(db), cfg, "", logger); err != nil {
			_ = db.Close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("riversys: unknown store %q", env.Store)
	}
	return s, nil
}

// SQLitePragmas are the pragmas of River's SQLite database: WAL, as River's
// own tests set it, and the busy timeout and synchronous level Backstop's
// SQLite store uses, so both write with the same durability.
const SQLitePragmas = "_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)"

// openSQLite opens River's SQLite file with one connection, as River's
// CLI and tests do (riversqlite's package documentation asks for it).
func openSQLite(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?"+SQLitePragmas)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// open migrates and builds the client for driver, filling in s.client.
func open[TTx any](ctx context.Context, s *System, driver riverdriver.Driver[TTx], cfg *river.Config, schema string, logger *slog.Logger) error {
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riversys: migrate: %w", err)
	}
	c, err := river.NewClient(driver, cfg)
	if err != nil {
		return err
	}
	s.client = clientOps{
		insert: func(ctx context.Context, args river.JobArgs) error {
			_, err := c.Insert(ctx, args, nil)
			return err
		},
		insertMany: func(ctx context.Context, params []river.InsertManyParams) error {
			_, err := c.InsertMany(ctx, params)
			return err
		},
		start:     c.Start,
		stop:      c.Stop,
		subscribe: c.SubscribeConfig,
	}
	return nil
}
