// Package scenarios holds no code: its tests are Backstop's failure
// scenarios, end to end. Each one runs the real relay against a real store
// (SQLite in a temporary file, and PostgreSQL when it is reachable)
// delivering through the real webhook transport to a local HTTP server
// that fails on purpose, as the test scripts it: per message or for a
// stretch of time it answers 503, 400 or 429 with Retry-After, hangs up,
// or stops listening so that connections are refused.
//
// Back-off, breaker timeouts, leases and instance timeouts run on one
// clock.Fake shared by the store and the relay, so an hour-long outage
// takes a moment. Nothing sleeps: tests wait for signals (the store calls
// the relay makes, the requests the server receives) and make the relay
// run a round when they need one, through the store's wake-up channel
// (store.Notifier).
//
// The scenarios, and what each asserts:
//
//   - a transient fault (503 twice, then 200) is ridden out, by the
//     in-process retry or by durable re-scheduling, without charging an
//     attempt or dead-lettering;
//   - a permanent fault (400) dead-letters its message after one attempt,
//     with its reason and error text, while the other messages go on; a
//     strictly ordered stream is held until an operator releases it or
//     replays the message;
//   - a 429 with Retry-After is honoured to the second on the fake clock,
//     blaming the destination;
//   - a destination down for an hour opens the breaker, which lets one
//     probe through per half-open window; nothing is charged or
//     dead-lettered, and on recovery everything is delivered once, in
//     stream order;
//   - a relay killed in the middle of a batch leaves its leases behind;
//     another relay takes over once the first is declared dead or its
//     leases expire, and nothing is lost.
//
// PostgreSQL scenarios use the server at BACKSTOP_TEST_POSTGRES_URL (by
// default postgres://postgres@127.0.0.1:5432/test?sslmode=disable), each in
// a schema of its own. They are skipped when it is unreachable, and fail
// instead when CI=true.
package scenarios
