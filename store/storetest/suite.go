// Package storetest is the conformance suite every store.Store runs.
//
// A store package wires it from a _test.go file:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			Open:      func(t *testing.T, cfg store.Config) (store.Store, error) { ... },
//			EnqueueTx: ..., // optional
//			InsertSQL: ..., // optional
//		})
//	}
//
// Run and Harness are the stable entry point: new checks are added inside
// the suite, never as new required Harness fields.
//
// The suite drives time with a clock.Fake passed in Config.Clock, so the
// store must take "now" from Config.Clock whenever it is set (lease expiry,
// due times, created, failed, dead-lettered, published and heartbeat
// times). It never sleeps. Subtests run in parallel, each on its own store.
//
// # Decisions the suite pins down
//
// Where store.go leaves a choice open, every store makes the same one:
//
//   - Enqueue (and EnqueueTx) set Seq, Status (Stored) and CreatedAt on the
//     caller's messages; CreatedAt comes from Config.Clock when set.
//   - ProcessBatch refuses a batch that fails store.Batch.Validate.
//   - Holding a lease means instance_id is the caller's. A failure, release
//     or renewal from the holder is applied even when the lease has expired,
//     as long as no other instance claimed the message since (nor was the
//     holder declared dead); otherwise it is Stale. A renewal sets the lease
//     to now + Claim.Lease (or LeaseDuration) but never shortens it.
//   - An instance is dead when its last heartbeat is more than
//     InstanceTimeout before now (exactly InstanceTimeout is alive); a lease
//     is free when its expiry is at or before now; a message is due when
//     its ScheduledFor is at or before now; Sweep deletes messages published
//     at or before now - Retention.
//   - The earlier message's effective ordering decides whether it holds
//     back later ones; a message whose own ordering is none is never held
//     back; messages with an empty Stream are unordered.
//   - ReleaseStream marks the stream's not-published messages that are
//     dead-lettered, failed, or waiting for a later try (ScheduledFor in
//     the future) as released: they stop holding the stream under strict
//     ordering, and stay released (they are still retried) until replayed.
//   - A failure with a zero Reason records ReasonUnknown; the dead-letter
//     entry's reason is the failure's when permanent and PoisonMessage when
//     the attempts or the strategy ran out (Config.DecideFailure).
//   - A message dead-lettered by hand (Operations.DeadLetter) gets an entry
//     with Reason PoisonMessage and the operator's text as ErrorMessage; a
//     message already dead-lettered is refused. RetryNow, ResetAttempts and
//     DeadLetter of an unknown id are store.ErrNotFound.
//   - dlq Add fills an empty ID, Status pending and FailureTime now, and
//     the reason's number and name from each other (Unknown when neither
//     is set). A List cursor naming no entry is dlq.ErrNotFound.
//   - Replaying a message entry resets its outbox row in one transaction:
//     not dead-lettered, attempts 0, StatusFailed cleared (other completed
//     flags kept), failure reason, error, fingerprint, due time and stream
//     release cleared. The row keeps its Seq, so it goes back to its place
//     in its stream. Replaying an entry again is dlq.ErrAlreadyReplayed.
//   - Deleting or purging a message entry also deletes the outbox row it
//     parked, when that row is still dead-lettered: the message is given
//     up and no longer holds its stream.
//   - RetryDistribution, FailureReasons and PoisonCandidates count
//     not-published messages with StatusFailed; PoisonCandidates leaves out
//     dead-lettered ones (they are no longer candidates). ScheduledBacklog
//     counts not-published, not-dead-lettered messages due after now.
//   - Rows written with plain SQL: an id is a UUID in any case (one
//     spelled in upper case is the same message, and the same id in
//     another case a duplicate); instance_id without lease_expiry, and
//     attempts or failure_reason outside 32 bits, are refused.
//   - StreamStatus: Head is the earliest not-published message that is not
//     dead-lettered or still holds the stream; Pending counts the
//     not-published, not-dead-lettered messages; Blocked and Why come from
//     store.DescribeStream.
package storetest

import (
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Harness adapts one store implementation to the suite.
type Harness struct {
	// Open returns a fresh, empty store configured with cfg, isolated from
	// every other store it returned, and registers its cleanup with
	// t.Cleanup. It returns the constructor's error as is: the suite checks
	// that an invalid Config is refused. Required.
	Open func(t *testing.T, cfg store.Config) (store.Store, error)
	// EnqueueTx writes msgs with the store package's EnqueueTx inside a
	// transaction begun on s's database, then commits that transaction
	// when commit is true and rolls it back otherwise. It returns
	// EnqueueTx's error (having rolled back). nil skips the tests that
	// need it.
	EnqueueTx func(t *testing.T, s store.Store, commit bool, msgs ...*outbox.Message) error
	// InsertSQL inserts one message with plain SQL naming only the
	// destination, type and payload columns, as an application written in
	// any language would:
	//
	//	INSERT INTO <prefix>outbox (destination, type, payload) VALUES (...)
	//
	// nil skips the test.
	InsertSQL func(t *testing.T, s store.Store, destination, typ string, payload []byte)
	// Reopen returns another store on s's database, configured with cfg,
	// as another process sharing the database would open it, and
	// registers its cleanup. nil skips the tests that need it.
	Reopen func(t *testing.T, s store.Store, cfg store.Config) store.Store
	// Poison writes rows the store cannot decode, as another language's
	// bug could, for the quarantine tests (see Poison). nil skips them.
	Poison *Poison
}

type testCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// Run runs every conformance test against the stores h opens. Each group
// and each test runs in parallel with the others.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is required")
	}
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Enqueue", enqueueCases},
		{"Claim", claimCases},
		{"ClaimBytes", claimBytesCases},
		{"Cascade", cascadeCases},
		{"Failure", failureCases},
		{"Release", releaseCases},
		{"Lease", leaseCases},
		{"LeaseTime", leaseTimeCases},
		{"Instance", instanceCases},
		{"Concurrency", concurrencyCases},
		{"Retention", retentionCases},
		{"DLQ", dlqCases},
		{"DLQLifecycle", dlqLifeCases},
		{"Poison", poisonCases},
		{"PlainSQL", plainSQLCases},
		{"Monitoring", monitoringCases},
		{"Gauges", gaugesCases},
		{"Operations", operationsCases},
		{"Validate", validateCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, h)
				})
			}
		})
	}
}
