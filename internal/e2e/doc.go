// Package e2e holds Backstop's end-to-end tests: the relay delivering
// through each real transport (webhook, NATS JetStream, RabbitMQ, a Go
// handler) from each real store (SQLite, PostgreSQL).
//
// The package has no code of its own, only tests. Each test of the matrix
// writes messages the way an application does, inside its own database
// transaction next to its business rows, runs relays against them, and
// reads back what the destination received:
//
//   - TestDeliversEveryMessageOnceInStreamOrder: every committed message
//     arrives exactly once, intact, each stream in order, and the outbox
//     and dead-letter queue are empty afterwards; messages of a rolled-back
//     transaction never arrive.
//   - TestCrashBetweenDeliveryAndCompletion: a relay delivers a message
//     and dies before recording it; a second instance waits for the lease
//     to expire and sends it again, at most once more (JetStream keeps it
//     once, de-duplicating by Nats-Msg-Id); nothing is lost and each
//     stream keeps its order.
//
// The servers are named by BACKSTOP_TEST_POSTGRES_URL,
// BACKSTOP_TEST_NATS_URL and BACKSTOP_TEST_AMQP_URL, with local defaults.
// A test whose server is unreachable is skipped, saying so, unless CI=true,
// where it fails.
//
//	go test -race ./internal/e2e/
package e2e
