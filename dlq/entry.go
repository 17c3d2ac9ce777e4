// Package dlq is Backstop's dead-letter queue: where a message or workflow
// task that cannot succeed is parked, with its failure history, for an
// operator to inspect, fix, resolve and replay.
//
// Queue is the interface of the design (Add, Get, List, Replay, Delete,
// Purge, Count); Operator adds what operators need on top (resolve with
// notes, bulk replay with a dry run, purge older than a time). Backstop has a
// memory queue (NewMemoryQueue) and persistent queues in the SQLite and
// PostgreSQL stores. Nothing is deleted silently: entries leave the queue
// only through Delete, Purge or PurgeBefore, which say what they removed.
package dlq

import (
	"context"
	"errors"
	"time"

	"github.com/backstophq/backstop/errorhandling"
)

// Status is where an entry is in an operator's work.
type Status string

// The entry statuses.
const (
	// StatusPending: parked, waiting for an operator.
	StatusPending Status = "pending"
	// StatusResolved: an operator dealt with it (see ResolutionNotes).
	StatusResolved Status = "resolved"
)

// Entry is one dead letter.
//
// A message from the outbox fills MessageID, Destination, Stream, Type,
// Payload and Headers; a workflow task fills the Task and DAG fields. The
// failure fields are common to both.
type Entry struct {
	// ID identifies the entry.
	ID string

	// TaskInstanceID, TaskID, DAGRunID and DAGID identify a failed workflow
	// task; empty for outbox messages.
	TaskInstanceID string
	TaskID         string
	DAGRunID       string
	DAGID          string

	// MessageID is the outbox message's id; empty for workflow tasks.
	MessageID string
	// Destination, Stream, Type, Payload and Headers are the original
	// message.
	Destination string
	Stream      string
	Type        string
	Payload     []byte
	Headers     map[string]string
	// Seq is the message's position in the outbox (its stream order).
	Seq int64

	// FailureReason is the reason's name, such as "PoisonMessage".
	FailureReason string
	// Reason is the typed failure reason.
	Reason errorhandling.FailureReason
	// FailureTime is when the entry was dead-lettered.
	FailureTime time.Time
	// FirstFailureTime is when the first failure happened.
	FirstFailureTime time.Time
	// Attempts is the number of attempts made.
	Attempts int
	// LastAttemptTime is when the last attempt failed.
	LastAttemptTime time.Time
	// ErrorMessage is the last error's text (at most 2000 characters).
	ErrorMessage string
	// Fingerprint groups the entry with others failing the same way.
	Fingerprint string
	// Metadata is free-form context (the rule that classified the error,
	// the instance that gave up, an HTTP status...).
	Metadata map[string]interface{}

	// Status is pending until an operator resolves the entry.
	Status Status
	// ResolutionNotes are the operator's notes on resolving.
	ResolutionNotes string
	// ResolvedAt is when the entry was resolved.
	ResolvedAt *time.Time

	// Replayed says whether the entry was sent back for delivery.
	Replayed bool
	// ReplayedAt is when it was replayed.
	ReplayedAt *time.Time
}

// Filters narrows List, Count-like queries and bulk replay. The zero value
// (or a nil *Filters) matches every entry. Set fields are AND-ed.
type Filters struct {
	// DAGID matches workflow entries of one DAG.
	DAGID string
	// TaskID matches workflow entries of one task.
	TaskID string
	// Destination matches message entries of one destination.
	Destination string
	// Stream matches message entries of one stream.
	Stream string
	// Reason matches one failure reason.
	Reason *errorhandling.FailureReason
	// Fingerprint matches entries failing the same way.
	Fingerprint string
	// Status matches pending or resolved entries.
	Status Status
	// After and Before bound FailureTime: After is inclusive, Before
	// exclusive.
	After  *time.Time
	Before *time.Time
	// Replayed matches replayed (true) or not yet replayed (false) entries.
	Replayed *bool
	// Limit caps the number of entries returned; 0 means no cap.
	Limit int
	// Cursor continues a listing after the entry with this ID, as returned
	// in the last entry of the previous page. Entries are listed by
	// FailureTime then ID.
	Cursor string
}

// Queue stores dead letters. Implementations must be safe for concurrent
// use.
type Queue interface {
	// Add parks an entry. An empty ID is assigned; Status defaults to
	// pending and FailureTime to now.
	Add(ctx context.Context, entry *Entry) error
	// Get returns the entry with the id, or an error matching ErrNotFound.
	Get(ctx context.Context, id string) (*Entry, error)
	// List returns the entries matching filters (nil matches all) ordered
	// by FailureTime then ID.
	List(ctx context.Context, filters *Filters) ([]*Entry, error)
	// Replay sends the entry back for delivery and marks it replayed.
	Replay(ctx context.Context, id string) error
	// Delete removes one entry.
	Delete(ctx context.Context, id string) error
	// Purge removes every entry.
	Purge(ctx context.Context) error
	// Count returns the number of entries.
	Count(ctx context.Context) (int, error)
}

// Operator is a Queue with the operations an operator's tools use.
type Operator interface {
	Queue
	// Resolve marks the entry resolved with the operator's notes.
	Resolve(ctx context.Context, id, notes string) error
	// ReplayMatching replays every pending, not yet replayed entry that
	// matches filters and returns them. With dryRun it changes nothing and
	// returns what it would replay.
	ReplayMatching(ctx context.Context, filters *Filters, dryRun bool) ([]*Entry, error)
	// PurgeBefore removes the entries dead-lettered before t and returns
	// how many it removed.
	PurgeBefore(ctx context.Context, t time.Time) (int, error)
}

// Errors returned by queues.
var (
	// ErrNotFound: no entry has the id.
	ErrNotFound = errors.New("dlq: entry not found")
	// ErrAlreadyReplayed: the entry was replayed before.
	ErrAlreadyReplayed = errors.New("dlq: entry already replayed")
)
