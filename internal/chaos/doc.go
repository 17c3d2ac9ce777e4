// Package chaos is Backstop's chaos suite: real relay processes (the
// relayproc program, built by the tests) deliver a steady load across many
// strictly ordered streams to a webhook receiver that keeps a ledger of
// every arrival, while the tests inject faults in turn: SIGKILL mid-batch,
// SIGSTOP past the lease and SIGCONT, every relay connection to PostgreSQL
// terminated, the destination down past the breaker's timeout, a flapping
// destination, and poison messages that an operator replays or releases.
// TestChaosPostgresCrash crashes PostgreSQL itself (a server the test
// starts in a temporary directory, every process killed with SIGKILL, then
// started again) under a load of strict streams and messages with no
// stream; TestChaosInboxPostgresCrash does the same under an inbox whose
// transactional handler must have each message's effect exactly once.
// At the end the ledger is checked for lost messages, order violations,
// duplicates, stale re-sends, dead letters caused by the outage and
// streams left blocked, and the recovery time after each fault is
// reported.
//
// `go test ./internal/chaos/` runs a small size (CI); `make chaos` runs the
// full size (BACKSTOP_CHAOS=full) and prints the report table.
package chaos
