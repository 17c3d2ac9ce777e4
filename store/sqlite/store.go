// Package sqlite is Backstop's embedded store: the outbox, its coordination
// and its dead-letter queue in one SQLite file, on the pure-Go
// modernc.org/sqlite driver (no cgo).
//
// The database runs in WAL mode with a busy timeout and foreign keys on.
// Every write goes through one connection and begins with BEGIN IMMEDIATE,
// so writers queue instead of deadlocking on a lock upgrade; reads use a
// separate read-only pool. SQLITE_BUSY and SQLITE_LOCKED are retried, not
// returned. The schema is applied by embedded, versioned migrations when the
// store opens.
//
// Applications write messages inside their own transactions with EnqueueTx
// on a transaction begun from DB(), or with plain SQL (see the outbox table
// in migrations/0001_outbox.sql). Times are stored as unix milliseconds; an
// id written in upper case is stored in lower case, as PostgreSQL's uuid
// type stores it (migration 0008).
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/clockstep"
)

// Store is the SQLite store. It implements store.Store and is safe for
// concurrent use.
type Store struct {
	cfg      store.Config
	w        *sql.DB // the single writer connection; DB() hands it out
	r        *sql.DB // read-only pool; w itself for in-memory databases
	modeCase string  // SQL: a message's destination ordering (see claim.go)
	queries  sync.Map
	hub      store.Hub // wakes relays in this process (store.Notifier)
	lockWait time.Duration
	turns    *semaphore.Weighted // the store's writes take the writer in turn (awaitTurn)
	readOnly bool                // ReadOnly: every write fails with ErrReadOnly
	relaxed  bool                // WithRelaxedDurability: synchronous=NORMAL

	// path and file are the database file as Open found it (file is nil
	// for an in-memory database), wal and shm its -wal and -shm files (nil
	// when SQLite did not make them: not in WAL mode): fileGone compares
	// the paths with them. rescued says the log was copied into the
	// database after its -wal file went (rescueLog).
	path     string
	file     os.FileInfo
	wal, shm os.FileInfo
	rescued  atomic.Bool

	// badCircuits logs the circuits rows Circuits reads past.
	badCircuits store.CircuitWarnings

	// steps tells RebaseSchedules when the clock was stepped back.
	steps clockstep.Watch
	// ahead keeps the clock's last reading in ProcessBatch, from which a
	// claim learns that it stepped forward (claimTime).
	ahead *clockstep.Forward

	// sweepStmt is sweepSQL (quarantine.go) prepared once on the writer
	// when the store opens: the statement is long (the partial index's
	// predicate) and planning it costs far more than running it on an
	// empty index, so it is not planned again for every batch.
	sweepStmt *sql.Stmt

	// prep counts the statements cachedStmt is preparing on the writer in
	// the background. Close stops them (prepStop, closing) and waits for
	// them: one still running held the writer's connection past Close, so
	// that connection stayed open, and with it the database's -wal and
	// -shm files when the process exited (4 of 6 CLI runs), and it cached
	// a statement of a closed store.
	prepMu   sync.Mutex
	closing  bool
	prep     sync.WaitGroup
	prepCtx  context.Context
	prepStop context.CancelFunc
}

// walSizeLimit is SQLite's journal_size_limit for the database's -wal
// file: a checkpoint that resets the log truncates it to this size. A
// reader holding a snapshot (an operator's sqlite3 shell, a backup) keeps
// every checkpoint from resetting the log, which grows with each write
// until the reader ends; without the limit the file kept that size for as
// long as the store stayed open. 16 MiB is four times the log SQLite's
// automatic checkpoint (1,000 pages) keeps in steady use, so the limit
// costs nothing there.
const walSizeLimit = 16 << 20

// Option adjusts a Store.
type Option func(*Store)

// WithLockWait bounds how long a store call waits for the database's
// write lock, and for the writer connection an application transaction
// begun on DB() may hold, before failing with ErrBusy. Zero or less means
// the default, 5 s. It is also SQLite's busy_timeout.
func WithLockWait(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.lockWait = d
		}
	}
}

// WithRelaxedDurability makes a commit wait for its write to the file,
// not for the disk (SQLite's synchronous=NORMAL in WAL mode): a commit
// then survives a crash of the process, but one of the machine (a power
// loss, a kernel panic) may take back the last commits. That loses
// messages: an application told its Enqueue committed, an inbox message
// whose broker was told it was stored. Single-row writes are faster;
// writes in batches (the relay's) barely change. By default every commit
// reaches the disk before it returns (synchronous=FULL).
func WithRelaxedDurability() Option {
	return func(s *Store) { s.relaxed = true }
}

// ReadOnly opens the database for reading only, for inspecting one this
// process may not write (a server's, owned by another user): nothing is
// created or migrated, the schema must already be at this build's version
// (or newer), and every write fails with ErrReadOnly. A database in WAL
// mode can be read while its server runs, or once it has shut down where
// SQLite may create the -shm file beside it.
func ReadOnly() Option {
	return func(s *Store) { s.readOnly = true }
}

// ErrReadOnly is matched (errors.Is) by the error of a write to a store
// opened with ReadOnly, and by Open's error when the database cannot be
// written (its file or directory is read-only for this process): open it
// with ReadOnly to read it.
var ErrReadOnly = errors.New("sqlite: database is read-only")

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path, applies the
// migrations, and returns the store. path ":memory:" gives a private
// in-memory database (one connection, for tests and demos). cfg has its
// defaults applied and is validated; a bad field is named in the error.
//
// Reads (Get, the dead-letter queue, monitoring) use a pool of their own:
// in WAL mode they never wait for writers, so reading through the store
// while an application transaction is open does not block. Writes wait at
// most the lock wait (WithLockWait) and then fail with ErrBusy. An
// in-memory database has one connection for everything: there, reads too
// wait for an open application transaction.
func Open(ctx context.Context, path string, cfg store.Config, opts ...Option) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if path == "" || strings.Contains(path, "?") {
		return nil, fmt.Errorf("sqlite: bad database path %q", path)
	}
	// A directory fails deep in SQLite as "unable to open database file"
	// or "disk I/O error", which Open reported as a read-only database.
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlite: %s is a directory, not a database file", path)
	}
	s := &Store{cfg: cfg, modeCase: modeCase(cfg), lockWait: defaultLockWait, turns: semaphore.NewWeighted(1),
		ahead: clockstep.NewForward(clock.MonotonicOf(cfg.Clock))}
	s.prepCtx, s.prepStop = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	// synchronous=FULL: in WAL mode NORMAL syncs only at checkpoints, and
	// a power loss took back commits that had returned (an inbox message
	// acknowledged to its broker, then gone).
	level := "FULL"
	if s.relaxed {
		level = "NORMAL"
	}
	params := fmt.Sprintf("_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(%s)",
		s.lockWait.Milliseconds(), level)
	memory := path == ":memory:"
	if s.readOnly {
		if memory {
			return nil, errors.New("sqlite: an in-memory database cannot be opened read-only")
		}
		return s.openReadOnly(ctx, path, params)
	}
	if !memory {
		params += fmt.Sprintf("&_pragma=journal_mode(WAL)&_pragma=journal_size_limit(%d)", walSizeLimit)
	}
	// The writer's page cache is 64 MB (SQLite's default is 2 MB): a claim
	// shares its limit among several streams (heads.go), and on a backlog
	// of a million rows the pages of those streams' rows and index entries
	// did not stay cached between batches (claim p99 of the dead-head shape
	// at 1M 460-1 200 ms with 2 MB, 41 ms with 64 MB; docs/benchmarks.md).
	// The cache grows only as pages are read.
	w, err := sql.Open("sqlite", path+"?"+params+"&_pragma=cache_size(-65536)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	s.w, s.r = w, w
	if _, err := migrate(ctx, w, cfg.TablePrefix, s.now(), cfg.Log()); err != nil {
		w.Close()
		if isReadOnly(err) {
			return nil, fmt.Errorf("%w: %s cannot be written by this process (open it with sqlite.ReadOnly to read it): %w",
				ErrReadOnly, path, err)
		}
		return nil, err
	}
	if !memory {
		// The file path names (a file: URI's too); one that cannot be
		// found (an in-memory URI) is not watched.
		file, _ := ReadOnlyURI(path)
		if abs, err := filepath.Abs(file); err == nil {
			if fi, err := os.Stat(abs); err == nil {
				s.path, s.file = abs, fi
				s.wal, _ = os.Stat(abs + "-wal")
				s.shm, _ = os.Stat(abs + "-shm")
			}
		}
	}
	if s.sweepStmt, err = w.PrepareContext(ctx, s.sql(sweepSQL)); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	if !memory {
		r, err := sql.Open("sqlite", path+"?"+params+"&_pragma=query_only(1)")
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		r.SetMaxOpenConns(4)
		s.r = r
	}
	return s, nil
}

// DB returns the database the store writes to, so that an application can
// begin its transactions on it and call EnqueueTx. It is one connection:
// SQLite has a single writer, and its transactions begin IMMEDIATE. While
// a transaction begun on it is open, the store's reads go on (they have
// connections of their own) but its writes wait for it, at most the lock
// wait, then fail with ErrBusy: inside the transaction, write with
// EnqueueTx.
func (s *Store) DB() *sql.DB { return s.w }

// ReadOnly reports whether the store was opened with the ReadOnly option.
func (s *Store) ReadOnly() bool { return s.readOnly }

// Config returns the store's configuration, defaults applied.
func (s *Store) Config() store.Config { return s.cfg }

// Close closes both connection pools.
func (s *Store) Close() error {
	var errs []error
	s.prepMu.Lock()
	s.closing = true
	s.prepMu.Unlock()
	s.prepStop()
	s.prep.Wait()
	s.forgetCachedStmts()
	if s.sweepStmt != nil {
		errs = append(errs, s.sweepStmt.Close())
	}
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

// now is the configured clock, else the process clock (which, for SQLite,
// is the database's).
func (s *Store) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now()
	}
	return time.Now()
}

// sql returns q with {{prefix}} replaced by the table prefix, cached.
func (s *Store) sql(q string) string {
	if v, ok := s.queries.Load(q); ok {
		return v.(string)
	}
	out := strings.ReplaceAll(q, "{{prefix}}", s.cfg.TablePrefix)
	out = strings.ReplaceAll(out, "{{mode}}", s.modeCase)
	s.queries.Store(q, out)
	return out
}

// write runs fn in a write transaction, retrying when the database is busy.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.withWriter(ctx, fn)
}

const insertMessage = `INSERT INTO {{prefix}}outbox
	(id, destination, stream, type, payload, headers, ordering, scheduled_for, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`

// EnqueueTx writes msgs inside the caller's transaction tx, which must have
// been begun on DB() (or another connection to the same file). Each message
// is prepared (validated, given a UUIDv7 when its ID is zero) before
// anything is written; rows are inserted in argument order, so their Seq
// follows it. On success each message has its Seq, CreatedAt and Status
// (Stored) set. The messages exist if and only if tx commits.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, msgs ...*outbox.Message) error {
	return s.enqueueTx(ctx, tx, msgs, false, outbox.Limits{})
}

// enqueueTx is EnqueueTx; writer says tx is a transaction of the store's
// writer connection, which has the INSERT prepared once for all (see
// cachedStmt): preparing it compiles the outbox's triggers into it, which
// cost more than the insert of a row. A caller's tx may be on another
// connection, and prepares it for the call. Messages are checked against
// limits: the defaults for Enqueue, outbox.MaxLimits for an inbox's
// Receive, whose caller checked its own.
func (s *Store) enqueueTx(ctx context.Context, tx *sql.Tx, msgs []*outbox.Message, writer bool, limits outbox.Limits) error {
	outbox.AttachTraceParent(ctx, msgs...)
	for _, m := range msgs {
		if err := m.PrepareLimits(limits); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	var stmt *sql.Stmt
	if writer {
		if cached := s.cachedStmt(insertMessage); cached != nil {
			stmt = tx.StmtContext(ctx, cached)
		}
	}
	if stmt == nil {
		var err error
		if stmt, err = tx.PrepareContext(ctx, s.sql(insertMessage)); err != nil {
			return fmt.Errorf("sqlite: enqueue: %w", err)
		}
	}
	defer stmt.Close()
	now := s.now()
	for _, m := range msgs {
		headers, err := encodeHeaders(m.Headers)
		if err != nil {
			return err
		}
		var seq int64
		if err := stmt.QueryRowContext(ctx, m.ID.String(), m.Destination, m.Stream, m.Type, blob(m.Payload),
			headers, nullString(string(m.Ordering)), nullMillis(m.ScheduledFor), now.UnixMilli()).Scan(&seq); err != nil {
			return fmt.Errorf("sqlite: enqueue %s: %w", m.ID, err)
		}
		m.Seq, m.Status, m.CreatedAt = seq, outbox.StatusStored, now.Truncate(time.Millisecond)
	}
	// A relay woken now waits for the single writer connection, so it
	// claims after tx commits (or rolls back).
	s.hub.Notify()
	return nil
}

// Subscribe implements store.Notifier: the channel receives a wake-up
// when this process enqueues messages or an operator makes messages due
// again (retry now, release a stream, replay a dead letter).
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	return s.hub.Subscribe(ctx)
}

// Enqueue writes msgs in a transaction of the store's own: all or none.
func (s *Store) Enqueue(ctx context.Context, msgs ...*outbox.Message) error {
	for _, m := range msgs {
		if err := m.Prepare(); err != nil {
			return err
		}
	}
	return s.write(ctx, func(tx *sql.Tx) error { return s.enqueueTx(ctx, tx, msgs, true, outbox.Limits{}) })
}

// Get returns the message with id, or an error matching store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*outbox.Message, error) {
	if err := s.fileGone(ctx); err != nil {
		return nil, err
	}
	var m *outbox.Message
	err := retryBusy(ctx, func() error {
		var err error
		m, err = scanShown(s.r.QueryRowContext(ctx, s.sql(`SELECT `+messageColumns+` FROM {{prefix}}outbox WHERE id = ?`), id.String()))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get %s: %w", id, err)
	}
	return m, nil
}

// DLQ returns the dead-letter queue kept in the same database.
func (s *Store) DLQ() dlq.Operator { return &deadLetters{s: s} }

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("sqlite: headers: %w", err)
	}
	return string(b), nil
}
