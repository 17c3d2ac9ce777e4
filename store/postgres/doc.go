// Package postgres is Backstop's production store: the outbox, its
// coordination and its dead-letter queue in PostgreSQL (15 or later), on
// github.com/jackc/pgx/v5. Many relay instances on many machines share one
// database; they coordinate through row locks (FOR UPDATE SKIP LOCKED) and
// leases, so scaling out means adding instances.
//
// Open (or New, on a pool the application owns) returns a Store; Migrate
// applies the embedded, versioned schema under an advisory lock, so
// instances starting together are safe. Tables are named with
// store.Config.TablePrefix ("backstop_" by default) and live in the first
// schema of the connection's search_path, or in the schema WithSchema
// names.
//
// Applications write messages inside their own transactions with EnqueueTx
// (pgx) or EnqueueSQLTx (database/sql), or with plain SQL from any
// language, naming only destination, type and payload:
//
//	INSERT INTO backstop_outbox (destination, type, payload)
//	VALUES ('billing', 'order.created', '{"id": 1}');
//
// Every other column has a default (a UUIDv7 id from the backstop_uuidv7()
// function, status Stored, created now). An insert notifies the channel
// backstop_outbox with the destination, so a relay using Listen wakes at
// once instead of waiting for its next poll.
//
// ProcessBatch is one round trip when the batch records no failures: its
// statements go to the server in one pipeline, which PostgreSQL runs as one
// implicit transaction. Failures add one: their rows are locked and read
// first, so that the destination's retry strategy decides in Go, exactly as
// in the SQLite store (store.Config.DecideFailure). The claim walks stream
// heads (migrations/0003_stream_heads.sql, docs/claim.md): a table of
// streams, kept by triggers, says which streams may have something to
// claim, so the messages held back behind a leased, waiting or
// dead-lettered head are never read, nor are future retries. Writers of
// one stream take its row's lock until they commit, so seq follows commit
// order, for plain SQL as for Enqueue.
// With store.Config.Clock unset the database clock decides lease expiry
// and due times.
package postgres
