package dlq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
)

// ReplayFunc sends a dead letter back for delivery: it re-enqueues the
// message or reschedules the task. It receives a copy of the entry. An
// error leaves the entry not replayed.
type ReplayFunc func(ctx context.Context, entry *Entry) error

// MemoryOption configures a MemoryQueue.
type MemoryOption func(*MemoryQueue)

// WithClock sets the clock that stamps FailureTime, ResolvedAt and
// ReplayedAt. Nil, the default, means clock.Real.
func WithClock(c clock.Clock) MemoryOption {
	return func(q *MemoryQueue) { q.clock = clock.OrReal(c) }
}

// WithReplayFunc sets the function Replay and ReplayMatching call to send an
// entry back. Without one (the default), replaying only marks the entry
// replayed, for a caller that re-enqueues the work itself.
func WithReplayFunc(fn ReplayFunc) MemoryOption {
	return func(q *MemoryQueue) { q.replay = fn }
}

// MemoryQueue is a dead-letter queue held in memory: for tests, examples and
// single-process deployments that accept losing their dead letters on
// restart. It implements Operator and is safe for concurrent use. It stores
// and returns copies, so neither a caller nor the queue sees the other's
// later changes to an entry.
type MemoryQueue struct {
	clock  clock.Clock
	replay ReplayFunc

	mu        sync.Mutex
	entries   map[string]*Entry
	replaying map[string]struct{} // ids whose ReplayFunc is running
}

var _ Operator = (*MemoryQueue)(nil)

// NewMemoryQueue returns an empty memory queue.
func NewMemoryQueue(opts ...MemoryOption) *MemoryQueue {
	q := &MemoryQueue{
		clock:     clock.Real,
		entries:   make(map[string]*Entry),
		replaying: make(map[string]struct{}),
	}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Add parks a copy of entry. It first fills, in the caller's entry, an
// empty ID with a new UUIDv7, an empty Status with StatusPending and a zero
// FailureTime with the clock's now, so the caller learns the ID. Adding an
// ID the queue already holds changes nothing and fails with an error
// matching ErrExists.
func (q *MemoryQueue) Add(ctx context.Context, entry *Entry) error {
	if entry == nil {
		return errors.New("dlq: add: nil entry")
	}
	if entry.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("dlq: add: new id: %w", err)
		}
		entry.ID = id.String()
	}
	if entry.Status == "" {
		entry.Status = StatusPending
	}
	if entry.FailureTime.IsZero() {
		entry.FailureTime = q.clock.Now()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.entries[entry.ID]; ok {
		return fmt.Errorf("dlq: add: entry %q: %w", entry.ID, ErrExists)
	}
	q.entries[entry.ID] = clone(entry)
	return nil
}

// Get returns a copy of the entry with the id, or an error matching
// ErrNotFound.
func (q *MemoryQueue) Get(ctx context.Context, id string) (*Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.entries[id]
	if !ok {
		return nil, notFound(id)
	}
	return clone(e), nil
}

// List returns copies of the entries matching every set field of filters,
// ordered by FailureTime then ID; it never returns nil. A Cursor that is an
// ID of an entry no longer in the queue is an error matching ErrNotFound
// (a NextCursor goes on working).
func (q *MemoryQueue) List(ctx context.Context, filters *Filters) ([]*Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out, err := q.selectLocked(filters, nil)
	if err == nil && filters != nil && filters.OmitPayload {
		for _, e := range out {
			e.Payload = nil
		}
	}
	return out, err
}

// selectLocked returns copies of the matching entries that keep accepts
// (nil keeps all), applying the cursor and limit after keep.
func (q *MemoryQueue) selectLocked(f *Filters, keep func(*Entry) bool) ([]*Entry, error) {
	var cursor *Entry
	if f != nil && f.Cursor != "" {
		if at, id, ok := ParseCursor(f.Cursor); ok {
			cursor = &Entry{ID: id, FailureTime: at}
		} else if c, ok := q.entries[f.Cursor]; ok {
			cursor = c
		} else {
			return nil, fmt.Errorf("dlq: list: cursor: %w", notFound(f.Cursor))
		}
	}
	return cloneAll(page(sortedEntries(q.entries), f, cursor, keep)), nil
}

// Replay is ReplayAs with no actor.
func (q *MemoryQueue) Replay(ctx context.Context, id string) error {
	return q.ReplayAs(ctx, id, Action{})
}

// ReplayAs calls the ReplayFunc (if any) with a copy of a pending entry
// and, when it succeeds, marks the entry replayed at the clock's now, by
// a.Actor with a.Notes. When the ReplayFunc fails, the entry stays pending
// and its error is returned. Replaying an entry already replayed, or whose
// replay is running in another goroutine, returns an error matching
// ErrAlreadyReplayed; a resolved entry, one matching ErrResolved. The
// ReplayFunc runs without the queue's lock held, so it may use the queue.
// If the entry is deleted while its ReplayFunc runs, Replay still succeeds.
func (q *MemoryQueue) ReplayAs(ctx context.Context, id string, a Action) error {
	_, err := q.replayOne(ctx, id, a.Cleaned())
	return err
}

// replayOne replays the entry and returns a copy of it as replayed (nil if
// it was deleted meanwhile).
func (q *MemoryQueue) replayOne(ctx context.Context, id string, a Action) (*Entry, error) {
	q.mu.Lock()
	e, ok := q.entries[id]
	if !ok {
		q.mu.Unlock()
		return nil, notFound(id)
	}
	if e.Replayed {
		q.mu.Unlock()
		return nil, fmt.Errorf("dlq: replay %q: %w", id, ErrAlreadyReplayed)
	}
	if e.Status == StatusResolved {
		q.mu.Unlock()
		return nil, fmt.Errorf("dlq: replay %q: %w", id, ErrResolved)
	}
	if _, busy := q.replaying[id]; busy {
		q.mu.Unlock()
		return nil, fmt.Errorf("dlq: replay %q: in progress: %w", id, ErrAlreadyReplayed)
	}
	q.replaying[id] = struct{}{}
	snapshot := clone(e)
	q.mu.Unlock()

	var err error
	if q.replay != nil {
		err = q.replay(ctx, snapshot)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.replaying, id)
	if err != nil {
		return nil, fmt.Errorf("dlq: replay %q: %w", id, err)
	}
	e, ok = q.entries[id]
	if !ok {
		return nil, nil
	}
	now := q.clock.Now()
	e.Replayed, e.ReplayedAt, e.ReplayedBy, e.ReplayNotes = true, &now, a.Actor, a.Notes
	if e.Status == StatusPending {
		e.Status = StatusReplayed
	}
	return clone(e), nil
}

// ReplayMatching replays, in listing order, every pending, not yet replayed
// entry that matches filters (Limit caps how many, Cursor where to start)
// and returns copies of the entries it replayed. With dryRun it changes
// nothing and returns what it would replay. Entries that another goroutine
// replays or deletes meanwhile are skipped. The first failing ReplayFunc,
// or a done ctx, stops the run: the entries replayed so far are returned
// with the error.
func (q *MemoryQueue) ReplayMatching(ctx context.Context, filters *Filters, dryRun bool) ([]*Entry, error) {
	return q.ReplayMatchingAs(ctx, filters, dryRun, Action{})
}

// ReplayMatchingAs is ReplayMatching recording a on each entry replayed.
func (q *MemoryQueue) ReplayMatchingAs(ctx context.Context, filters *Filters, dryRun bool, a Action) ([]*Entry, error) {
	a = a.Cleaned()
	q.mu.Lock()
	candidates, err := q.selectLocked(filters, func(e *Entry) bool {
		return e.Status == StatusPending && !e.Replayed
	})
	q.mu.Unlock()
	if err != nil || dryRun {
		return candidates, err
	}
	done := []*Entry{}
	for _, c := range candidates {
		if err := ctx.Err(); err != nil {
			return done, fmt.Errorf("dlq: replay matching: %w", err)
		}
		e, err := q.replayOne(ctx, c.ID, a)
		switch {
		case errors.Is(err, ErrAlreadyReplayed), errors.Is(err, ErrResolved), errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return done, err
		case e != nil:
			done = append(done, e)
		}
	}
	return done, nil
}

// Resolve is ResolveAs with no actor.
func (q *MemoryQueue) Resolve(ctx context.Context, id, notes string) error {
	return q.ResolveAs(ctx, id, Action{Notes: notes})
}

// ResolveAs marks the entry resolved by a.Actor with a.Notes, stamping
// ResolvedAt with the clock's now. Resolving again replaces the actor, the
// notes and the time.
func (q *MemoryQueue) ResolveAs(ctx context.Context, id string, a Action) error {
	a = a.Cleaned()
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.entries[id]
	if !ok {
		return notFound(id)
	}
	now := q.clock.Now()
	e.Status, e.ResolutionNotes, e.ResolvedBy, e.ResolvedAt = StatusResolved, a.Notes, a.Actor, &now
	return nil
}

// ResolveEntriesAs resolves those of ids whose status is still from and
// returns their ids; see Operator.
func (q *MemoryQueue) ResolveEntriesAs(ctx context.Context, ids []string, from Status, a Action) ([]string, error) {
	a = a.Cleaned()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	done := []string{}
	for _, id := range ids {
		if e, ok := q.entries[id]; ok && e.Status == from {
			resolved := now
			e.Status, e.ResolutionNotes, e.ResolvedBy, e.ResolvedAt = StatusResolved, a.Notes, a.Actor, &resolved
			done = append(done, id)
		}
	}
	return done, nil
}

// DeleteEntries removes those of ids whose status is still from (any when
// from is empty) and returns their ids; see Operator.
func (q *MemoryQueue) DeleteEntries(ctx context.Context, ids []string, from Status) ([]string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	done := []string{}
	for _, id := range ids {
		if e, ok := q.entries[id]; ok && (from == "" || e.Status == from) {
			delete(q.entries, id)
			done = append(done, id)
		}
	}
	return done, nil
}

// Delete removes the entry with the id, or returns an error matching
// ErrNotFound.
func (q *MemoryQueue) Delete(ctx context.Context, id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.entries[id]; !ok {
		return notFound(id)
	}
	delete(q.entries, id)
	return nil
}

// Purge removes every entry.
func (q *MemoryQueue) Purge(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.entries)
	return nil
}

// PurgeBefore removes the entries whose FailureTime is before t and returns
// how many it removed.
func (q *MemoryQueue) PurgeBefore(ctx context.Context, t time.Time) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for id, e := range q.entries {
		if e.FailureTime.Before(t) {
			delete(q.entries, id)
			n++
		}
	}
	return n, nil
}

// Count returns the number of pending entries.
func (q *MemoryQueue) Count(ctx context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, e := range q.entries {
		if e.Status == StatusPending {
			n++
		}
	}
	return n, nil
}

// notFound returns an error matching ErrNotFound that names the id.
func notFound(id string) error {
	return fmt.Errorf("dlq: entry %q: %w", id, ErrNotFound)
}
