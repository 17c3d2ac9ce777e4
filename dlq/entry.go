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
	"github.com/backstophq/backstop/outbox"
)

// Status is where an entry is in its lifecycle. An entry starts pending;
// replaying it makes it replayed, resolving it (from pending or replayed)
// makes it resolved; deleting it removes it. Only pending entries wait for
// someone: the queue's depth (Count) counts them alone.
type Status string

// The entry statuses.
const (
	// StatusPending: parked, waiting for an operator.
	StatusPending Status = "pending"
	// StatusReplayed: sent back for delivery (see ReplayedBy, ReplayedAt
	// and ReplayNotes). If it fails again, a new entry is parked.
	StatusReplayed Status = "replayed"
	// StatusResolved: dealt with and closed (see ResolvedBy, ResolvedAt
	// and ResolutionNotes); it can no longer be replayed.
	StatusResolved Status = "resolved"
)

// Valid reports whether s is one of the entry statuses.
func (s Status) Valid() bool {
	return s == StatusPending || s == StatusReplayed || s == StatusResolved
}

// Action says who changes an entry's status and why; the queue records
// both on the entry (ReplayedBy and ReplayNotes, or ResolvedBy and
// ResolutionNotes), with the time. Texts are cleaned as every stored text
// is (outbox.CleanText): invalid UTF-8 replaced, NUL removed, at most
// MaxErrorMessage characters.
type Action struct {
	// Actor is who acts: an operator's name, an API client's id, or
	// ActorBackstop when Backstop itself settles an entry.
	Actor string
	// Notes say why, in words.
	Notes string
}

// ActorBackstop is the actor of the changes Backstop makes by itself, such
// as resolving the entry of a message that was delivered after it had been
// dead-lettered by hand.
const ActorBackstop = "backstop"

// Cleaned returns a with its texts cleaned as queues store them.
func (a Action) Cleaned() Action {
	return Action{Actor: outbox.CleanText(a.Actor, MaxErrorMessage), Notes: outbox.CleanText(a.Notes, MaxErrorMessage)}
}

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

	// Status is pending until the entry is replayed or resolved.
	Status Status
	// ResolutionNotes are the notes given on resolving.
	ResolutionNotes string
	// ResolvedBy is who resolved the entry.
	ResolvedBy string
	// ResolvedAt is when the entry was resolved.
	ResolvedAt *time.Time

	// Replayed says whether the entry was sent back for delivery; it stays
	// true when a replayed entry is resolved afterwards.
	Replayed bool
	// ReplayedBy is who replayed the entry.
	ReplayedBy string
	// ReplayNotes are the notes given on replaying.
	ReplayNotes string
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
	// MessageID matches the entries of one outbox message (a message
	// dead-lettered, replayed and dead-lettered again has several).
	MessageID string
	// Reason matches one failure reason.
	Reason *errorhandling.FailureReason
	// Fingerprint matches entries failing the same way.
	Fingerprint string
	// Status matches entries in one status.
	Status Status
	// After and Before bound FailureTime: After is inclusive, Before
	// exclusive.
	After  *time.Time
	Before *time.Time
	// Replayed matches replayed (true) or not yet replayed (false) entries.
	Replayed *bool
	// Limit caps the number of entries returned; 0 means no cap.
	Limit int
	// OmitPayload lists the entries without their payloads (Payload nil):
	// a listing that shows none need not read one, and a page of 1,000
	// entries of 1 MiB each otherwise held a gigabyte at once.
	OmitPayload bool
	// Cursor continues a listing after the last entry of the previous
	// page: NextCursor of that entry (its failure time and ID, which go on
	// working once the entry is gone), or the entry's ID (which must still
	// exist). Entries are listed by FailureTime then ID.
	Cursor string
}

// Queue stores dead letters. Implementations must be safe for concurrent
// use.
type Queue interface {
	// Add parks an entry. An empty ID is assigned, a given one kept;
	// Status defaults to pending and FailureTime to now. Adding an ID the
	// queue holds already fails and changes nothing.
	Add(ctx context.Context, entry *Entry) error
	// Get returns the entry with the id, or an error matching ErrNotFound.
	Get(ctx context.Context, id string) (*Entry, error)
	// List returns the entries matching filters (nil matches all) ordered
	// by FailureTime then ID.
	List(ctx context.Context, filters *Filters) ([]*Entry, error)
	// Replay sends a pending entry back for delivery and marks it
	// replayed. A replayed entry is ErrAlreadyReplayed, a resolved one
	// ErrResolved.
	Replay(ctx context.Context, id string) error
	// Delete removes one entry.
	Delete(ctx context.Context, id string) error
	// Purge removes every entry.
	Purge(ctx context.Context) error
	// Count returns the number of pending entries: the queue's depth.
	// Replayed and resolved entries are kept (for their history) but not
	// counted.
	Count(ctx context.Context) (int, error)
}

// Operator is a Queue with the operations an operator's tools use.
type Operator interface {
	Queue
	// Resolve marks a pending or replayed entry resolved with the
	// operator's notes (ResolveAs with no actor). Resolving a resolved
	// entry again replaces its notes and time.
	Resolve(ctx context.Context, id, notes string) error
	// ResolveAs is Resolve recording who resolved the entry and why.
	ResolveAs(ctx context.Context, id string, a Action) error
	// ReplayAs is Replay recording who replayed the entry and why.
	ReplayAs(ctx context.Context, id string, a Action) error
	// ReplayMatchingAs is ReplayMatching recording a on each entry it
	// replays.
	ReplayMatchingAs(ctx context.Context, filters *Filters, dryRun bool, a Action) ([]*Entry, error)
	// ReplayMatching replays every pending, not yet replayed entry that
	// matches filters and returns them. With dryRun it changes nothing and
	// returns what it would replay.
	ReplayMatching(ctx context.Context, filters *Filters, dryRun bool) ([]*Entry, error)
	// PurgeBefore removes the entries dead-lettered before t and returns
	// how many it removed.
	PurgeBefore(ctx context.Context, t time.Time) (int, error)
	// ResolveEntriesAs resolves, in one step, those of ids whose status is
	// still from (the status they were listed with), recording a, and
	// returns the ids it resolved. An entry someone replayed, resolved or
	// deleted since it was listed is left as it is: a bulk resolve never
	// overwrites another operator's decision.
	ResolveEntriesAs(ctx context.Context, ids []string, from Status, a Action) ([]string, error)
	// DeleteEntries removes, in one step, those of ids whose status is
	// still from (whatever their status when from is empty), and their
	// messages that are still dead-lettered, and returns the ids it
	// removed.
	DeleteEntries(ctx context.Context, ids []string, from Status) ([]string, error)
}

// Errors returned by queues.
var (
	// ErrNotFound: no entry has the id.
	ErrNotFound = errors.New("dlq: entry not found")
	// ErrExists: an entry with the id exists already; it is kept as it
	// is. Giving an entry an id derived from what failed (such as the
	// workflow run, task and attempt) makes adding it idempotent: the
	// second add of the same failure fails with ErrExists.
	ErrExists = errors.New("dlq: entry exists")
	// ErrAlreadyReplayed: the entry was replayed before.
	ErrAlreadyReplayed = errors.New("dlq: entry already replayed")
	// ErrResolved: the entry was resolved; it cannot be replayed.
	ErrResolved = errors.New("dlq: entry resolved")
	// ErrInFlight: the entry's message was dead-lettered by hand while a
	// relay delivered it, and that delivery has not ended; replaying it now
	// would deliver it twice at once. Replay it once the delivery fails (if
	// it succeeds, the entry is resolved).
	ErrInFlight = errors.New("dlq: message still being delivered")
)

// Clean makes every text of e safe to store and to log, in place, as the
// persistent queues store them: invalid UTF-8 replaced, NUL removed, each
// text (header names and values, metadata strings at any depth included)
// cut to MaxErrorMessage characters. The payload is bytes and kept as is.
func (e *Entry) Clean() {
	for _, p := range []*string{&e.ID, &e.TaskInstanceID, &e.TaskID, &e.DAGRunID, &e.DAGID, &e.MessageID,
		&e.Destination, &e.Stream, &e.Type, &e.FailureReason, &e.ErrorMessage, &e.Fingerprint,
		&e.ResolutionNotes, &e.ResolvedBy, &e.ReplayedBy, &e.ReplayNotes} {
		*p = outbox.CleanText(*p, MaxErrorMessage)
	}
	e.Status = Status(outbox.CleanText(string(e.Status), MaxErrorMessage))
	if len(e.Headers) > 0 {
		h := make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			h[outbox.CleanText(k, MaxErrorMessage)] = outbox.CleanText(v, MaxErrorMessage)
		}
		e.Headers = h
	}
	if len(e.Metadata) > 0 {
		e.Metadata = cleanValue(e.Metadata).(map[string]interface{})
	}
}

// cleanValue returns v with its strings cleaned, copying maps and slices.
func cleanValue(v interface{}) interface{} {
	switch x := v.(type) {
	case string:
		return outbox.CleanText(x, MaxErrorMessage)
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, val := range x {
			out[outbox.CleanText(k, MaxErrorMessage)] = cleanValue(val)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, val := range x {
			out[i] = cleanValue(val)
		}
		return out
	case map[string]string:
		out := make(map[string]interface{}, len(x))
		for k, val := range x {
			out[outbox.CleanText(k, MaxErrorMessage)] = outbox.CleanText(val, MaxErrorMessage)
		}
		return out
	case []string:
		out := make([]interface{}, len(x))
		for i, val := range x {
			out[i] = outbox.CleanText(val, MaxErrorMessage)
		}
		return out
	case error:
		return outbox.CleanText(x.Error(), MaxErrorMessage)
	}
	return v
}
