// Package rawsys is the raw SQL baseline: a minimal queue table (id,
// payload, created_at) written with plain INSERTs and drained by workers
// that claim and delete in one statement. It is what a hand-written outbox
// costs the database, the floor the other systems are compared with.
package rawsys

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// Runs says whether the baseline has scenario name: it has no streams, no
// retries and no latency case.
func Runs(name string) bool {
	switch name {
	case scenario.Enqueue1, scenario.Enqueue100, scenario.Drain, scenario.DrainLarge, scenario.Work:
		return true
	}
	return false
}

// The baseline's knobs, fixed for every run and listed in BENCHMARKS.md.
const (
	// PostgresWorkers claim concurrently on PostgreSQL (SKIP LOCKED keeps
	// them apart); SQLite has one writer, so one worker.
	PostgresWorkers = 4
	SQLiteWorkers   = 1
	// ClaimBatch is the LIMIT of one claim-and-delete: the fastest of 100,
	// 500 and 1,000 on the machine of BENCHMARKS.md, so the baseline is
	// a strong one.
	ClaimBatch = 1000
	// idlePoll is how long a worker waits after a claim that found nothing.
	idlePoll = 10 * time.Millisecond
	// preloadChunk is how many rows one preload INSERT writes.
	preloadChunk = 5000
)

// Settings describes the baseline for the report.
var Settings = fmt.Sprintf("%d workers on PostgreSQL (%d on SQLite), each claiming and deleting up to %d rows a "+
	"transaction and handling them before COMMIT, waiting %v when the table is empty",
	PostgresWorkers, SQLiteWorkers, ClaimBatch, idlePoll)

// db is one store's SQL for the baseline.
type db interface {
	// insert writes payloads in one statement (one transaction).
	insert(ctx context.Context, payloads [][]byte) error
	// claim deletes up to limit of the oldest rows, calls handle with
	// their payloads and commits; it returns how many it deleted.
	claim(ctx context.Context, limit int, handle func([]byte) error) (int, error)
	close()
}

// System is the raw SQL baseline under test.
type System struct {
	db        db
	workers   int
	completed atomic.Int64
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	errMu     sync.Mutex
	err       error
}

var _ scenario.System = (*System)(nil)

// Open creates the baseline's table in env.
func Open(ctx context.Context, env scenario.Env) (*System, error) {
	if env.Store == scenario.SQLite {
		d, err := openSQLite(ctx, env.Dir)
		if err != nil {
			return nil, err
		}
		return &System{db: d, workers: SQLiteWorkers}, nil
	}
	d, err := openPostgres(ctx, env.URL, env.Schema)
	if err != nil {
		return nil, err
	}
	return &System{db: d, workers: PostgresWorkers}, nil
}

func payloads(msgs []scenario.Msg) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Payload()
	}
	return out
}

// Insert writes msgs with one INSERT statement, its own transaction.
func (s *System) Insert(ctx context.Context, msgs []scenario.Msg) error {
	return s.db.insert(ctx, payloads(msgs))
}

// Preload writes msgs preloadChunk rows a statement.
func (s *System) Preload(ctx context.Context, msgs []scenario.Msg) error {
	for i := 0; i < len(msgs); i += preloadChunk {
		if err := s.Insert(ctx, msgs[i:min(i+preloadChunk, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// Start runs the claim-and-delete workers. The baseline does not retry: a
// handler error rolls the claim back and the rows are claimed again.
func (s *System) Start(ctx context.Context, h scenario.Handler) error {
	ctx, s.cancel = context.WithCancel(ctx)
	handle := func(p []byte) error {
		m, err := scenario.ParsePayload(p)
		if err != nil {
			return err
		}
		return h(ctx, m)
	}
	for range s.workers {
		s.wg.Go(func() {
			for ctx.Err() == nil {
				n, err := s.db.claim(ctx, ClaimBatch, handle)
				if err != nil && ctx.Err() == nil {
					s.fail(err)
				}
				s.completed.Add(int64(n))
				if n == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(idlePoll):
					}
				}
			}
		})
	}
	return nil
}

func (s *System) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Completed counts the rows deleted by committed claims.
func (s *System) Completed() int64 { return s.completed.Load() }

// Stop stops the workers and returns the first claim error, if any.
func (s *System) Stop(context.Context) error {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close closes the database.
func (s *System) Close() error {
	s.db.close()
	return nil
}

// claimedRows is what the rows of a claim offer, pgx's and database/sql's
// alike.
type claimedRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// handleClaimed reads every claimed row (id, payload), then hands each
// payload to handle, and returns how many there were. It reads them all
// first, so that the statement has finished before the handler runs.
func handleClaimed(rows claimedRows, handle func([]byte) error) (int, error) {
	var got [][]byte
	for rows.Next() {
		var (
			id      int64
			payload []byte
		)
		if err := rows.Scan(&id, &payload); err != nil {
			return 0, err
		}
		got = append(got, payload)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, p := range got {
		if err := handle(p); err != nil {
			return 0, err
		}
	}
	return len(got), nil
}
