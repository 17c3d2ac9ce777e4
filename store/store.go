// Package store is the coordination contract between Backstop's relay
// instances and the database that holds the outbox.
//
// One call, ProcessBatch, does what the work-coordination design's
// process_work_batch does, in one round trip on PostgreSQL and one
// transaction on SQLite: it heart-beats the calling instance, records the
// outcomes of the previous batch (completions, failures, releases), renews
// the leases the caller still holds, and claims the next batch in stream
// order. Every store (store/sqlite, store/postgres) implements Store and
// passes the conformance suite in store/storetest.
//
// # Claim rules
//
// A message is claimable when it is not published, not dead-lettered, not
// leased (or its lease has expired), and due (ScheduledFor unset or past).
// Streams are scoped by destination: the messages of one (destination,
// stream) pair are ordered by Seq. Within such a stream a claimable message
// is still held back when an earlier message of the same stream:
//
//   - holds an unexpired lease (every ordering mode but none);
//   - under OrderingStrict, waits for a later try (ScheduledFor in the
//     future, whether after a failure or a release that re-scheduled it), or
//     is dead-lettered and its stream has not been released by an operator.
//
// Under OrderingRelease a failure does not hold back later messages; under
// OrderingNone nothing does. Earlier messages that are claimable themselves
// do not hold back later ones: both are claimed, in order, and the relay
// delivers them one after the other.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// Store is the outbox, its coordination, and its dead-letter queue.
// Implementations must be safe for concurrent use by many goroutines and,
// for shared databases, by many processes.
type Store interface {
	// Enqueue writes messages in a transaction of the store's own. To
	// write them inside the application's transaction use the store
	// package's EnqueueTx.
	Enqueue(ctx context.Context, msgs ...*outbox.Message) error
	// ProcessBatch records the outcomes in b, renews leases, and claims the
	// next batch, atomically.
	ProcessBatch(ctx context.Context, b *Batch) (*Result, error)
	// Get returns a message by id, or an error matching ErrNotFound.
	Get(ctx context.Context, id uuid.UUID) (*outbox.Message, error)

	Operations
	Monitoring

	// DLQ is the store's persistent dead-letter queue.
	DLQ() dlq.Operator
	// Config returns the store's configuration with its defaults applied
	// (the destinations' policies a relay must agree with).
	Config() Config
	// Sweep deletes published messages older than the retention period
	// and returns how many it deleted.
	Sweep(ctx context.Context) (int, error)
	// Close releases the store's resources.
	Close() error
}

// Operations are what an operator does to messages by hand.
type Operations interface {
	// RetryNow makes a waiting message due at once.
	RetryNow(ctx context.Context, id uuid.UUID) error
	// ResetAttempts sets a message's attempts to zero.
	ResetAttempts(ctx context.Context, id uuid.UUID) error
	// ReleaseStream lets the later messages of a strict stream go past its
	// failed and dead-lettered messages (the cascade release), and returns
	// how many blocking messages it released.
	ReleaseStream(ctx context.Context, destination, stream string) (int, error)
	// DeadLetter moves a message to the dead-letter queue by hand, with
	// the operator's reason text. ErrNotFound when it does not exist,
	// ErrDeadLettered when it already is, ErrDelivered when it was
	// delivered.
	DeadLetter(ctx context.Context, id uuid.UUID, reason string) error
}

// Monitoring are the monitoring queries of the design.
type Monitoring interface {
	// RetryDistribution counts failed messages by attempts.
	RetryDistribution(ctx context.Context) ([]AttemptsCount, error)
	// FailureReasons counts failed messages by failure reason.
	FailureReasons(ctx context.Context) ([]ReasonCount, error)
	// ScheduledBacklog summarises the messages waiting for a later try.
	ScheduledBacklog(ctx context.Context) (Backlog, error)
	// PoisonCandidates lists failed messages with at least minAttempts
	// attempts, most attempts first: at most MaxPoisonCandidates of them,
	// without their payloads (Payload empty): a hundred payloads of up to
	// a megabyte each, read for a count.
	PoisonCandidates(ctx context.Context, minAttempts int) ([]*outbox.Message, error)
	// BlockedStreams counts the streams whose later messages are held back
	// under strict ordering by a message that waits for its retry or sits
	// in the dead-letter queue (and whose stream was not released).
	BlockedStreams(ctx context.Context) (int, error)
	// StreamStatus describes one stream: its head and why it is blocked.
	StreamStatus(ctx context.Context, destination, stream string) (*StreamStatus, error)
}

// Admin is what the admin API and the operator's commands need beyond
// Store. Both stores implement it (their admin*.go files).
type Admin interface {
	// EnqueueIdempotent writes msgs in one transaction of the store's own,
	// unless key was used before: then it writes nothing and returns the
	// ids written under the key the first time. created says which.
	EnqueueIdempotent(ctx context.Context, key string, msgs ...*outbox.Message) (ids []uuid.UUID, created bool, err error)
	// ListMessages lists messages in seq order after f.AfterSeq.
	ListMessages(ctx context.Context, f MessageFilter) ([]*outbox.Message, error)
	// Cancel deletes an undelivered message no relay holds: it will never
	// be delivered. ErrLeased when a relay holds it, ErrNotFound when it
	// does not exist or was delivered, ErrDeadLettered when it waits in
	// the dead-letter queue (a replay of its entry would bring it back:
	// delete the entry instead, which deletes the message).
	Cancel(ctx context.Context, id uuid.UUID) error
	// Audit records an operator's action; r.ID and r.At are set.
	Audit(ctx context.Context, r *AuditRecord) error
	// AuditLog lists the records matching f, newest first.
	AuditLog(ctx context.Context, f AuditFilter) ([]*AuditRecord, error)
	// Now is the time by the clock the store stamps failure and
	// dead-letter times with: the database's on PostgreSQL, this host's
	// on SQLite (Config.Clock in tests). A bulk action bounds itself by it.
	Now(ctx context.Context) (time.Time, error)
}

// MessageFilter narrows ListMessages; zero fields match everything.
type MessageFilter struct {
	Destination, Stream, Type string
	// State is one of the MessageState values; empty matches all.
	State MessageState
	// AfterSeq is the cursor: list messages with a larger Seq.
	AfterSeq int64
	// Limit caps the messages returned; 0 means 100.
	Limit int
	// OmitPayload lists the messages without their payloads (Payload
	// nil), as dlq.Filters.OmitPayload does.
	OmitPayload bool
}

// MessageState is what a message is doing, for listing.
type MessageState string

// The message states.
const (
	StateReady        MessageState = "ready"         // waiting to be claimed, never failed
	StateRetrying     MessageState = "retrying"      // failed, waiting for its retry
	StateLeased       MessageState = "leased"        // held by a relay
	StateDeadLettered MessageState = "dead_lettered" // in the dead-letter queue
	StateDelivered    MessageState = "delivered"     // kept for the retention period
)

// AuditRecord is one operator action.
type AuditRecord struct {
	ID     int64
	At     time.Time
	Actor  string // the token's name
	Action string // replay, resolve, release, delete, purge, reset, cancel...
	Target string // the message, entry or stream acted on; empty for bulk
	Filter string // a bulk action's filter, as JSON
	Count  int    // how many it touched
	Notes  string
}

// AuditFilter narrows AuditLog.
type AuditFilter struct {
	Target string
	Action string
	// BeforeID is the cursor: records with a smaller ID.
	BeforeID int64
	// Limit caps the records returned; 0 means 100.
	Limit int
}

// CleanAudit makes r's text storable anywhere (outbox.CleanText: valid
// UTF-8, no NUL); notes are kept to 2000 characters.
func CleanAudit(r *AuditRecord) {
	r.Actor, r.Action, r.Target = outbox.CleanText(r.Actor, 200), outbox.CleanText(r.Action, 200), outbox.CleanText(r.Target, 500)
	r.Filter, r.Notes = outbox.CleanText(r.Filter, 4000), outbox.CleanText(r.Notes, 2000)
}

// ErrLeased is returned when an action needs a message no relay holds.
var ErrLeased = errors.New("store: message is leased by a relay")

// ErrDeadLettered is returned when an action needs a message that is not
// in the dead-letter queue: dead-lettering it again, or cancelling it
// (its pending dead-letter entry holds it; deleting the entry drops it).
var ErrDeadLettered = errors.New("store: message is dead-lettered")

// ErrDelivered is returned when an action needs a message not yet
// delivered, such as dead-lettering it.
var ErrDelivered = errors.New("store: message already delivered")

// Instance identifies a relay process.
type Instance struct {
	// ID is unique per process (a UUID is a good choice). Required.
	ID string
	// Host and PID say where it runs.
	Host string
	PID  int
	// StartedAt is when the process started.
	StartedAt time.Time
}

// Completion records that a message completed steps. A Status holding
// StatusPublished marks the message delivered: it is deleted, or kept
// until swept when a retention period is configured; it is applied whoever
// holds the lease now (delivered is delivered), and resolves the pending
// dead-letter entries of a message dead-lettered by hand meanwhile. A zero
// Status is the design's "Status=0" release: the lease is cleared and
// nothing else changes. Other flags are OR-ed in and the lease cleared.
// A completion without StatusPublished is applied only while the caller
// holds the message's lease; otherwise it is reported in Result.Stale.
type Completion struct {
	ID     uuid.UUID
	Status outbox.Status
}

// Failure records a failed attempt charged to the message: the completed
// flags and StatusFailed are OR-ed in, attempts grow by one, the error,
// reason and fingerprint are recorded, the lease is cleared and the
// message is scheduled for now plus the destination strategy's delay (at
// least RetryAfter). When Permanent is set, or the attempts reach the
// destination's MaxAttempts, the message is dead-lettered in the same
// transaction (reason PoisonMessage when attempts ran out). A failure for a
// message the caller no longer leases is ignored and reported in
// Result.Stale.
type Failure struct {
	ID              uuid.UUID
	CompletedStatus outbox.Status
	Error           string
	Reason          errorhandling.FailureReason
	Fingerprint     string
	Permanent       bool
	RetryAfter      time.Duration
}

// Release gives a leased message back without charging an attempt. With
// After zero it only clears the lease (the cascade release). With After
// set it also schedules the message for now+After: a fault blamed on the
// destination. CompletedStatus flags are OR-ed in; Error, when set, is
// recorded as the last error without touching attempts.
type Release struct {
	ID              uuid.UUID
	After           time.Duration
	CompletedStatus outbox.Status
	Error           string
}

// ClaimRequest says what to claim.
type ClaimRequest struct {
	// Limit is the most messages to claim; 0 claims none.
	Limit int
	// Lease is how long the claim holds; 0 means the store's
	// LeaseDuration.
	Lease time.Duration
	// Destinations restricts the claim to these destinations; empty means
	// all.
	Destinations []string
	// ExcludeDestinations are not claimed from (their circuit is open).
	ExcludeDestinations []string
	// PerDestination caps the claim per destination: at most
	// PerDestination[d] messages of destination d (the relay's free
	// delivery slots there), so that a slow destination never takes the
	// whole batch. A destination not in the map is capped by Limit only; 0
	// claims none of it. Within a destination, ready streams are served
	// round-robin (a stream that gave messages waits behind the others),
	// not by backlog depth.
	PerDestination map[string]int
	// MaxBytes, when positive, bounds the bytes of the messages claimed,
	// as ClaimedBytes counts them (their payloads and headers as the store
	// keeps them, and ClaimOverhead each): the claim takes its messages in
	// seq order, as Limit does, and stops before the one that would take
	// their total past MaxBytes, so that what it takes of a stream is
	// still a prefix. Zero: no bound but Limit.
	MaxBytes int64
	// FirstAnySize lets the claim's first message past MaxBytes: one
	// larger than MaxBytes is then claimed, alone. A caller sets it so
	// that no message is too large ever to be claimed (the relay does, and
	// so holds at most its budget and one message more); unset, a message
	// larger than MaxBytes is not claimed, nor are the later messages of
	// its stream, and the claim goes on past them.
	FirstAnySize bool
}

// ClaimOverhead is what ClaimRequest.MaxBytes counts for each message
// besides its payload and headers (PostgreSQL's claim function, migration
// 0039, spells it as 512). The relay counts the same for each message it
// holds against PrefetchBytes.
const ClaimOverhead = 512

// ClaimedBytes is what ClaimRequest.MaxBytes counts for a message whose
// payload is payload bytes and whose headers, as the store keeps them
// (JSON), are headers bytes.
func ClaimedBytes(payload, headers int64) int64 { return payload + headers + ClaimOverhead }

// Batch is one call's worth of work.
type Batch struct {
	Instance    Instance
	Completions []Completion
	Failures    []Failure
	Releases    []Release
	// RenewLeases extends the leases the caller holds on these messages;
	// ids it no longer holds are reported in Result.Stale, and those whose
	// rows another session holds locked (an operator's open transaction)
	// in Result.Deferred, not renewed by this call: one locked row must not
	// fail the call, with the claim and every other renewal in it.
	RenewLeases []uuid.UUID
	Claim       ClaimRequest
	// SkipMaintenance leaves out the heart-beat of Instance and the
	// reaping of silent instances: a caller that heart-beats on its own
	// cadence (Fleet.Heartbeat) and leaves reaping to the fleet's leader
	// (Fleet.ReapDeadInstances) keeps them off its hot path.
	SkipMaintenance bool
	// LazyCommit says that no lease in RenewLeases is of a message of an
	// ordered stream (its Stream set, its ordering not none). When the
	// batch also records no outcome (no Completions, Failures or
	// Releases), a store may commit a claim that leases no message of a
	// stream without waiting for the disk (PostgreSQL: synchronous_commit
	// off for that transaction): a database crash may then lose the
	// leases, and their messages are claimed and delivered again, as
	// at-least-once allows, while no stream's order rests on them.
	LazyCommit bool
}

// Result is what ProcessBatch returns.
type Result struct {
	// Claimed are the newly leased messages, ordered by Seq.
	Claimed []*outbox.Message
	// DeadLettered are the failures that moved their message to the
	// dead-letter queue.
	DeadLettered []uuid.UUID
	// Stale are failures, releases and renewals for messages the caller no
	// longer leases; they were not applied.
	Stale []uuid.UUID
	// Deferred are renewals not applied because another session held the
	// message's row locked; the caller still holds the lease as it was,
	// and renews it again in a later call. Only PostgreSQL has them.
	Deferred []uuid.UUID
	// Renewed are the leases RenewLeases extended, with their new expiry
	// as the database computed it (the store's clock, not the caller's).
	// A relay renews against these expiries and against the LeaseExpiry of
	// Claimed messages, never against its own clock's idea of them.
	Renewed []Lease
	// Now is the store's clock when the batch ran: the time from which the
	// claim and the renewals computed their expiries (PostgreSQL: the
	// transaction's now(), or the store's Clock; SQLite: the store's
	// clock). An expiry minus Now is the lease the store granted, whatever
	// the caller's clock reads. Both stores of this module set it on every
	// batch that claims or renews; zero means the store did not say.
	Now time.Time
	// DeadInstances is how many silent instances were declared dead and
	// had their leases released.
	DeadInstances int
	// Rejected are outcomes (completions, failures, releases) the
	// database refused to record, each with its error; the rest of the
	// batch, the claim included, was applied. The message keeps its lease
	// until it lapses, so it is claimed again then.
	Rejected []Rejection
	// Quarantined are rows the claim took but could not decode (a value of
	// the wrong type, an infinite time, headers that are not a JSON
	// object...): each was dead-lettered on its own with reason
	// SerializationError and an error naming the column and the value,
	// and is not in Claimed.
	Quarantined []uuid.UUID
}

// Rejection is an outcome ProcessBatch could not record.
type Rejection struct {
	ID  uuid.UUID
	Err error
}

// Lease is a message's lease after a renewal.
type Lease struct {
	ID uuid.UUID
	// Expiry is when the lease lapses, in the store's time.
	Expiry time.Time
}

// AttemptsCount is one row of RetryDistribution.
type AttemptsCount struct {
	Attempts int
	Count    int
}

// ReasonCount is one row of FailureReasons.
type ReasonCount struct {
	Reason errorhandling.FailureReason
	Count  int
}

// Backlog is the scheduled-retry backlog: messages with ScheduledFor in the
// future.
type Backlog struct {
	Count  int
	Next   time.Time
	Latest time.Time
}

// StreamStatus describes a stream.
type StreamStatus struct {
	Destination string
	Stream      string
	// Head is the earliest undelivered message; nil when the stream is
	// empty.
	Head *outbox.Message
	// Pending counts the undelivered messages of the stream.
	Pending int
	// Blocked says whether the head holds back the rest.
	Blocked bool
	// Why says in words what the head is doing, such as "head message
	// 0192... failed 3 times (TransportUnavailable: connection refused)
	// and waits for its retry at 12:04:05; 17 later messages wait behind
	// it (strict ordering)".
	Why string
}

// ErrNotFound is returned for an unknown message id.
var ErrNotFound = errors.New("store: message not found")

// MaxPoisonCandidates bounds what PoisonCandidates lists (messages with
// their payloads): a retry backlog of 33,000 made every stats request
// read and send 22 MB. The gauge (store.Gauges) counts them all.
const MaxPoisonCandidates = 100

// MaxIdempotencyKeyLen is the longest idempotency key, in bytes. PostgreSQL
// indexes the key, and an index entry has a limit (a random 3 KB key
// failed); both stores refuse a longer key with CheckIdempotencyKey's
// error, so a key works the same on either.
const MaxIdempotencyKeyLen = 255

// ShowUndecodable readies for an operator's view (a list, Get, a stream's
// head) a row whose values could not all be read, err naming the first: the
// message keeps what could be read (the rest zero), and its Error, unless
// the row already says why it failed (a quarantine does), names the value.
// One such row, written before the stores refused them, must not make a
// whole list fail.
func ShowUndecodable(m *outbox.Message, err error) {
	if m.Error == "" {
		m.Error = outbox.TruncateError(fmt.Sprintf("undecodable outbox row (seq %d): %s", m.Seq, err))
	}
}

// FanOutKeyPrefix begins the idempotency keys under which a topic's
// fan-out (backstop serve's routes) writes its copies: fanout:<topic
// message id>. These keys are the fan-out's own: the admin API refuses a
// client key that begins with it, and a Go caller of EnqueueIdempotent
// must not use one either (a topic message whose key another writer took
// is dead-lettered rather than fanned out, and that writer's later
// requests under the key are answered as duplicates of the copies).
const FanOutKeyPrefix = "fanout:"

// CheckIdempotencyKey returns an error saying why key cannot be an
// idempotency key (empty, or over MaxIdempotencyKeyLen bytes), or nil.
func CheckIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty idempotency key")
	case len(key) > MaxIdempotencyKeyLen:
		return fmt.Errorf("idempotency key of %d bytes: at most %d", len(key), MaxIdempotencyKeyLen)
	}
	return nil
}

// WakeGate is implemented by stores whose wake-ups cost every writer
// something, so that they are sent only while someone waits for them.
// PostgreSQL's NOTIFY does: committing transactions that sent one wait
// for each other, so with a NOTIFY on every insert a store's writers
// could not commit in parallel. A relay calls SetWaiting(id, true) just
// before it waits on its Subscribe channel, and SetWaiting(id, false) once
// it is busy (its claims come back full); while no one is registered,
// enqueues send no wake-up.
// Registering is idempotent; registrations of instances declared dead are
// dropped. A message whose writer looked for waiters just before the
// registration and committed just after it sends no wake-up, so a caller
// that registers claims once more a moment later.
type WakeGate interface {
	SetWaiting(ctx context.Context, id string, waiting bool) error
}

// Notifier is implemented by stores that can tell a relay that messages
// were enqueued, so that an idle relay need not poll often.
type Notifier interface {
	// Subscribe returns a channel that receives a value whenever messages
	// may have become claimable: enqueued by this process (SQLite) or by
	// any process once their transaction commits (PostgreSQL's
	// LISTEN/NOTIFY). Wake-ups are coalesced; a relay must still claim to
	// see what is there. The channel is closed when ctx is done.
	Subscribe(ctx context.Context) (<-chan struct{}, error)
}

// Inbox is implemented by stores that keep an inbox (package inbox): a
// received message is written as an outbox row for the inbox's reserved
// destination, next to a de-duplication record of its source message id,
// so that the relay's claim rules, ordering, leases, retries and
// dead-letter queue apply to it unchanged.
type Inbox interface {
	// Receive writes m and the de-duplication record (inbox, messageID)
	// in one transaction, with m's InboxDigest. When that record exists
	// already it writes nothing and returns true: the message is a
	// duplicate; unless the record's digest differs from m's, when it
	// returns an *IDReusedError (ErrIDReused): another message under a
	// used id.
	Receive(ctx context.Context, inbox, messageID string, m *outbox.Message) (duplicate bool, err error)
	// SweepReceived deletes at most limit de-duplication records of inbox
	// received longer than window ago, by the store's clock, and returns
	// how many it deleted. A record whose message (m of its Receive) is
	// still in the outbox is kept: the message has not been handled.
	SweepReceived(ctx context.Context, inbox string, window time.Duration, limit int) (int, error)
	// BeginTx begins a transaction on the store's database, in which a
	// handler writes its effects and completes its message (Tx.Complete).
	BeginTx(ctx context.Context) (Tx, error)
}

// InboxCursors is implemented by stores that keep where an inbox's
// receiver is in a source that leaves the consumer to say where it starts
// (a RabbitMQ stream queue, by offset), so that a receiver started again
// resumes there. Both stores implement it.
type InboxCursors interface {
	// SaveInboxCursor records next, the position after the last message
	// of source that inbox has handled (stored, found a duplicate or
	// refused). next must not be negative; source is valid UTF-8 without
	// NUL (inbox.Inbox.SaveCursor checks it).
	SaveInboxCursor(ctx context.Context, inbox, source string, next int64) error
	// InboxCursor returns the position SaveInboxCursor last recorded for
	// inbox and source; ok is false when none was.
	InboxCursor(ctx context.Context, inbox, source string) (next int64, ok bool, err error)
}

// Tx is a transaction on a store's database. What a handler writes in it,
// the outbox messages it enqueues and the completion of the message it
// handles are committed together or not at all.
type Tx interface {
	// Exec runs a statement with the database's placeholders ($1 on
	// PostgreSQL, ? on SQLite) and returns how many rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query that returns at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Enqueue writes outbox messages inside the transaction.
	Enqueue(ctx context.Context, msgs ...*outbox.Message) error
	// Complete marks message id delivered inside the transaction if
	// instanceID still holds its lease, and otherwise writes nothing and
	// returns an error matching ErrLeaseLost (the transaction should then
	// be rolled back). Once the transaction commits, the relay's own
	// completion of the message changes nothing.
	Complete(ctx context.Context, id uuid.UUID, instanceID string) error
	// Commit commits the transaction; Rollback abandons it (after Commit
	// it does nothing). Rollback's error matches ErrUnavailable when the
	// transaction's connection to the database was lost.
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Driver returns the driver's transaction: a *sql.Tx on SQLite, a
	// pgx.Tx on PostgreSQL.
	Driver() any
}

// Row is one row of Tx.QueryRow.
type Row interface {
	// Scan copies the row's columns into dest; with no row it returns the
	// driver's no-rows error (sql.ErrNoRows, pgx.ErrNoRows).
	Scan(dest ...any) error
}

// ErrUnavailable is matched by the error of a store call that failed for
// want of the database rather than because of what it was given: the
// connection was refused, closed or killed, or the call timed out. It
// recorded nothing and may be made again as it is. The relay keeps the
// outcomes of such a call to record later, where it drops an outcome the
// store refuses on its own.
var ErrUnavailable = errors.New("store: unavailable")

// ErrTimedOut is matched, with ErrUnavailable, by the error of a store
// call that the database cancelled for running too long (PostgreSQL's
// statement_timeout) or that ran past its context's deadline. A smaller
// call may succeed where this one failed: the relay halves its claims and
// recordings after one (docs/relay.md) rather than making the same call
// again for ever.
var ErrTimedOut = errors.New("store: timed out")

// Reachability is implemented by a store that can tell an error it
// returned because its database was out of reach (a refused, closed or
// killed connection, a timeout, a lock held past the store's wait) from one
// it returned because the database refused the call. A service built on
// the store answers the former "try again" (the admin API: 503 with
// Retry-After) rather than as a failure of the request.
type Reachability interface {
	Unreachable(err error) bool
}

// ErrLeaseLost is matched by Tx.Complete's error when the instance no
// longer holds the message's lease (it expired and another instance took
// it, an operator dead-lettered it, or it was delivered already).
var ErrLeaseLost = errors.New("store: lease lost")

// FleetCounter is a Fleet that counts its instances alive, so that the
// relays can divide a fleet-wide limit among them (relay.RateLimit).
type FleetCounter interface {
	// LiveInstances counts the instances whose last heart-beat is within
	// the InstanceTimeout of now.
	LiveInstances(ctx context.Context) (int, error)
}

// FleetLeaver is a store.Fleet an instance can leave as it stops: its row
// goes at once, so that LiveInstances stops counting it (the relays left
// take its share of a RateLimit back at their next heart-beat, not one
// InstanceTimeout later) and nothing waits for it to go silent. Leases it
// still holds (a delivery that outlived the shutdown) are left to lapse at
// their expiry, not released: the delivery may still be running. Both
// stores implement it.
type FleetLeaver interface {
	LeaveFleet(ctx context.Context, instance string) error
}

// ScheduleRebaser is a store that moves the waits it holds when its clock
// is stepped back. A retry's due time, and the wait after a fault blamed on
// the destination (a Release with After), are wall times: the time of the
// failure, stamped on the message, plus the delay. When the clock is then
// stepped back, a message whose failure is stamped ahead of the clock was
// scheduled before the step, and waited the step's length on top of its
// delay: a retry due in a minute when the clock went back an hour ran an
// hour and a minute later. A time an application chose (Message.
// ScheduledFor, no failure stamped) is kept.
type ScheduleRebaser interface {
	// RebaseSchedules reads the store's clock and, when it was stepped back
	// since the last call (or this is the first), moves each waiting
	// message whose failure is stamped ahead of the clock to its delay
	// from now, and returns how many it moved. Cheap when the clock was
	// not stepped: one reading.
	RebaseSchedules(ctx context.Context) (int, error)
}

// StreamTurnSweeper is a store that keeps a row per ordered stream for its
// writers to take turns on (PostgreSQL: writers lock it until they commit,
// so that a stream's messages are numbered in commit order, and no claim
// ever waits for it), which outlives the stream's messages. The fleet's
// leader sweeps them at each beat, as it sweeps expired idempotency keys.
type StreamTurnSweeper interface {
	// SweepStreamTurns visits at most limit turn rows, going on from
	// where its last call ended, deletes those of streams with nothing
	// left to deliver, passing over those a writer holds, and returns how
	// many it visited (fewer than limit: it went round the whole table).
	SweepStreamTurns(ctx context.Context, limit int) (int, error)
}

// Vacuumer is a store whose tables collect dead rows faster than the
// database's own vacuum may clear them. On PostgreSQL every message
// delivered leaves two dead row versions behind (the one its lease
// replaced and the one its recording deleted) and their index entries; the
// claim reads its indexes from their oldest entries, and passes over the
// dead ones at the front until a vacuum removes them, so each claim costs a
// little more for every message delivered since the last vacuum. With
// autovacuum's defaults (a pass a minute at most, throttled) or without
// it, insert-and-work over two minutes completed a third of what it
// completed over 20 seconds. The fleet's leader calls Vacuum every few
// seconds.
type Vacuumer interface {
	// Vacuum vacuums, one after the other, those of the store's busy
	// tables whose dead rows passed the store's threshold, and returns the
	// names of those it vacuumed; with none past it, it costs one read of
	// the database's statistics. A table the store may not vacuum (another
	// role owns it) is left to the database's autovacuum.
	Vacuum(ctx context.Context) ([]string, error)
}

// Fleet is implemented by stores through which the relay instances that
// share them act as one: they heart-beat on their own cadence, elect a
// leader for maintenance, and share each destination's circuit, so that
// when one instance finds a destination down every instance stops
// claiming for it and the fleet sends one probe per probe interval. Times
// are the store's (the database clock on PostgreSQL, the configured Clock
// in tests); durations are measured from the store's now.
type Fleet interface {
	// Heartbeat records that the instance is alive.
	Heartbeat(ctx context.Context, in Instance) error
	// ReapDeadInstances declares dead the instances other than self that
	// have been silent for longer than the InstanceTimeout, releases
	// their leases, and returns how many it declared dead.
	ReapDeadInstances(ctx context.Context, self string) (int, error)
	// AcquireLeadership makes instance the fleet's leader for ttl if no
	// other instance holds an unexpired leadership, or extends its own,
	// and reports whether instance leads.
	AcquireLeadership(ctx context.Context, instance string, ttl time.Duration) (bool, error)
	// ResignLeadership ends instance's leadership, if it holds it.
	ResignLeadership(ctx context.Context, instance string) error
	// SweepBatch deletes at most limit delivered messages kept longer
	// than the retention period and returns how many it deleted.
	SweepBatch(ctx context.Context, limit int) (int, error)
	// SweepIdempotencyKeys deletes at most limit idempotency keys older
	// than Config.IdempotencyWindow, oldest first, and returns how many it
	// deleted.
	SweepIdempotencyKeys(ctx context.Context, limit int) (int, error)
	// PendingByDestination counts the undelivered messages that are not
	// dead-lettered, per destination (a count query; payloads are never
	// read).
	PendingByDestination(ctx context.Context) (map[string]int, error)

	// Circuits returns the shared state of every destination that has
	// one.
	Circuits(ctx context.Context) ([]Circuit, error)
	// OpenCircuit opens destination's circuit for the fleet, unless it is
	// open, with the first probe due firstProbe from now, and reports
	// whether this call opened it.
	OpenCircuit(ctx context.Context, destination, instance string, firstProbe time.Duration) (bool, error)
	// TakeProbe takes destination's probe token when its circuit is open,
	// a probe is due and no pause holds it: the probe interval doubles (up
	// to maxInterval) and the next probe is due that much later. It
	// reports whether the caller may send the probe; of instances racing
	// for one token, one gets it. A next probe due further from the
	// store's now than the probe interval was set when the clock read
	// later (it was stepped back since), and is due at once.
	TakeProbe(ctx context.Context, destination, instance string, maxInterval time.Duration) (bool, error)
	// CloseCircuit closes destination's circuit (a probe succeeded).
	CloseCircuit(ctx context.Context, destination, instance string) error
	// PauseDestination holds destination for the whole fleet for d from
	// now (a Retry-After), at most MaxPause; a pause is extended, never
	// shortened. A pause ending more than MaxPause after the store's now
	// was set when the clock read later, and holds nothing.
	PauseDestination(ctx context.Context, destination string, d time.Duration) error
}

// MaxPause is the longest a destination is paused for the fleet
// (Fleet.PauseDestination), as long as the relay takes a retry-after
// to be. It also tells a pause from a clock stepped back: after a step of
// an hour back, a pause of a minute would otherwise hold the destination
// for an hour and a minute.
const MaxPause = time.Hour

// Circuit is a destination's shared circuit state.
type Circuit struct {
	Destination string
	// Open is set while the destination's circuit is open.
	Open bool
	// OpenedBy and OpenedAt say which instance opened it, and when.
	OpenedBy string
	OpenedAt time.Time
	// NextProbe is when the next probe is due; ProbeInterval the wait
	// after it.
	NextProbe     time.Time
	ProbeInterval time.Duration
	// PausedUntil is the end of a Retry-After pause; Paused says whether
	// it is still in force at the store's now.
	PausedUntil time.Time
	Paused      bool
	// ProbeDue says whether, at the store's now, the circuit is open and
	// its next probe is due.
	ProbeDue bool
}
