// Package inbox is the receiving half of at-least-once delivery: it takes
// messages from a source (NATS JetStream, RabbitMQ, a signed webhook),
// stores each once, and hands it to the handler registered for its type
// under the same failure handling as the relay's deliveries.
//
// A received message becomes an outbox row whose destination is
// "inbox:<name>" (Destination), whose stream is the source's ordering key
// and whose type is the message type; in the same transaction the store
// records the source's message id in its de-duplication table. A message
// the source delivers again (after a lost acknowledgement, a crash, a
// redelivery timeout) finds its id recorded: it is acknowledged, dropped
// and counted, and its handler does not run again. The record keeps a
// digest of the message's type and payload: the same id received with
// another type or payload is another message, refused (ErrIDReused) and
// kept as a dead letter, never dropped as a duplicate. Receivers acknowledge
// the source only after the row is committed, so nothing received is lost.
//
// Handlers run under a relay (package relay) restricted to the inbox's
// destination, so everything the relay does for outgoing messages applies
// to incoming ones: claim rules and leases, ordering by stream (strict,
// release or none, from the store's policy for the destination), the
// classification of errors and whom they are charged to, in-process retries
// for blips, durable retries on the policy's schedule, a circuit breaker,
// the dead-letter queue with replay, and the operator tools. Configure the
// destination's policy in the store's Config.Policies under
// Destination(name).
//
// # Handlers
//
// Handle registers a transactional handler: it receives a store.Tx, writes
// its business rows and enqueues outbox messages in it, and the inbox
// completes the message inside the same transaction before committing. The
// effects, the outgoing messages and the completion commit together or not
// at all: a crash before the commit leaves nothing and the message is
// handled again once its lease expires; a crash after it leaves the message
// completed, so it is never handled twice. HandleFunc registers a handler
// without a transaction, for effects outside the database; it is called at
// least once.
//
// A handler's error is classified by the relay's classifier. The inbox's
// default treats errors nobody classified as transient faults of the
// message (reason HandlerException): retried on the policy's schedule and
// dead-lettered as poison once its attempts run out. Wrap an error with
// errorhandling.Permanent to dead-letter the message at once, or with
// errorhandling.WithBlame(err, errorhandling.BlameDestination) for a fault
// of what the handler depends on, which opens the inbox's breaker instead
// of charging the message. A message of a type with no handler here is
// left to an instance that has one (a rolling deploy, where instances of
// the older version claim messages of a type only the newer one handles):
// given back without charging an attempt, with a warning and a counter,
// until it has waited Config.NoHandlerWait (1 h); then it is a permanent
// fault of the message, dead-lettered with a reason naming the type, and
// can be replayed once a handler exists.
//
// # Sharing a store with an outbox relay
//
// Inbox rows live in the outbox table. A relay of the application that
// claims every destination (relay.DeadLetterUnknown, the default) would
// dead-letter them as unknown; run it with relay.IgnoreUnknown, or add
// the inbox's destination to it (Inbox.Destination) and skip Inbox.Run.
package inbox
