package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/outbox"
)

// enqueueChunk is the most rows one INSERT statement writes (9 parameters
// a row, well under PostgreSQL's 65535).
const enqueueChunk = 1000

// Enqueue writes msgs in a transaction of the store's own, in argument
// order (their Seq follows it). Each message is validated and given a
// UUIDv7 when its ID is zero (outbox.Message.Prepare); if one is invalid
// nothing is written. On success every message has its Seq, Status and
// CreatedAt set.
//
// It is one INSERT statement whatever the number of messages, run on its
// own (autocommit): atomic like a transaction, one round trip instead of
// three.
func (s *Store) Enqueue(ctx context.Context, msgs ...*outbox.Message) error {
	return s.enqueue(ctx, s.pool, msgs, outbox.Limits{})
}

// EnqueueTx writes msgs inside the caller's pgx transaction, so that they
// exist if and only if it commits. It validates and prepares every message
// first (outbox.Message.Prepare) and writes nothing if one is invalid.
// Messages are inserted in argument order by one statement (insertSQL)
// whatever their number, so its prepared form is reused.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, msgs ...*outbox.Message) error {
	return s.enqueue(ctx, tx, msgs, outbox.Limits{})
}

// enqueue validates msgs against limits and prepares them, then writes
// them (queryInsert) through q.
func (s *Store) enqueue(ctx context.Context, q querier, msgs []*outbox.Message, limits outbox.Limits) error {
	outbox.AttachTraceParent(ctx, msgs...)
	if err := prepareAll(msgs, limits); err != nil || len(msgs) == 0 {
		return err
	}
	rows, err := s.queryInsert(ctx, q, msgs)
	if err != nil {
		return fmt.Errorf("postgres: enqueue: %w", err)
	}
	if err := readSeqs(msgs, rows); err != nil {
		return fmt.Errorf("postgres: enqueue: %w", err)
	}
	return nil
}

// queryInsert writes msgs through q: one message with insertOneSQL, more
// with insertSQL's arrays.
func (s *Store) queryInsert(ctx context.Context, q querier, msgs []*outbox.Message) (pgx.Rows, error) {
	n := len(msgs)
	if n == 1 {
		m := msgs[0]
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return nil, err
		}
		return q.Query(ctx, s.sql.insertOne, s.now(), pgUUID(m.ID), m.Destination, m.Stream, m.Type,
			nonNilBytes(m.Payload), h, nullString(string(m.Ordering)), nullTime(m.ScheduledFor))
	}
	// The ids go as pgtype.UUID, which pgx sends in binary (see pgUUID).
	ids := make([]pgtype.UUID, n)
	dests, streams, types := make([]string, n), make([]string, n), make([]string, n)
	payloads, headers := make([][]byte, n), make([]string, n)
	orderings, scheduled := make([]*string, n), make([]*time.Time, n)
	for i, m := range msgs {
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return nil, err
		}
		ids[i], dests[i], streams[i], types[i] = pgUUID(m.ID), m.Destination, m.Stream, m.Type
		payloads[i], headers[i] = nonNilBytes(m.Payload), h
		orderings[i], scheduled[i] = nullString(string(m.Ordering)), nullTime(m.ScheduledFor)
	}
	return q.Query(ctx, s.sql.insert, s.now(), ids, dests, streams, types, payloads, headers, orderings, scheduled)
}

// EnqueueSQLTx is EnqueueTx for database/sql users, inside the caller's
// *sql.Tx. It writes multi-row INSERTs of at most 1000 rows whose
// parameters are only strings, byte slices and times, so it works with the
// pgx stdlib driver (github.com/jackc/pgx/v5/stdlib) and with other
// PostgreSQL drivers.
func (s *Store) EnqueueSQLTx(ctx context.Context, tx *sql.Tx, msgs ...*outbox.Message) error {
	outbox.AttachTraceParent(ctx, msgs...)
	if err := prepareAll(msgs, outbox.Limits{}); err != nil {
		return err
	}
	for start := 0; start < len(msgs); start += enqueueChunk {
		chunk := msgs[start:min(start+enqueueChunk, len(msgs))]
		q, args, err := s.insertSQL(chunk)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("postgres: enqueue: %w", err)
		}
		if err := readInserted(chunk, sqlRows{rows}); err != nil {
			return fmt.Errorf("postgres: enqueue: %w", err)
		}
	}
	return nil
}

func prepareAll(msgs []*outbox.Message, limits outbox.Limits) error {
	for _, m := range msgs {
		if err := m.PrepareLimits(limits); err != nil {
			return err
		}
	}
	return nil
}

// insertSQL builds one multi-row INSERT for msgs and its arguments, for
// drivers that take no arrays.
func (s *Store) insertSQL(msgs []*outbox.Message) (string, []any, error) {
	now := s.now()
	cols := 8
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + s.n.outbox +
		` (id, destination, stream, type, payload, headers, ordering, scheduled_for`)
	if now != nil {
		cols = 9
		b.WriteString(`, created_at`)
	}
	b.WriteString(`) VALUES `)
	args := make([]any, 0, cols*len(msgs))
	for i, m := range msgs {
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			b.WriteString(", ")
		}
		p := len(args)
		fmt.Fprintf(&b, "($%d::uuid, $%d, $%d, $%d, $%d::bytea, $%d::jsonb, $%d, $%d::timestamptz",
			p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8)
		args = append(args, m.ID.String(), m.Destination, m.Stream, m.Type, nonNilBytes(m.Payload), h,
			nullString(string(m.Ordering)), nullTime(m.ScheduledFor))
		if now != nil {
			fmt.Fprintf(&b, ", $%d::timestamptz", p+9)
			args = append(args, *now)
		}
		b.WriteString(")")
	}
	b.WriteString(` RETURNING id::text, seq, status, created_at`)
	return b.String(), args, nil
}

// readSeqs sets Seq, Status and CreatedAt on msgs from the rows of
// insertSQL or insertOneSQL, which return only (seq, created_at): the
// statement numbers its rows in argument order (ORDER BY m.n, with seq's
// nextval evaluated after the sort), so the i-th smallest seq is the i-th
// message's whatever order the rows come back in. Returning the id and
// status as well cost a 100-row enqueue about 3 % of its rate, and a new
// row's status is always StatusStored (the column's default; no trigger
// sets it).
func readSeqs(msgs []*outbox.Message, rows pgx.Rows) error {
	defer rows.Close()
	seqs := make([]int64, 0, len(msgs))
	var created time.Time
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq, &created); err != nil {
			return err
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(seqs) != len(msgs) {
		return fmt.Errorf("insert returned %d rows for %d messages", len(seqs), len(msgs))
	}
	slices.Sort(seqs)
	for i, m := range msgs {
		m.Seq, m.Status, m.CreatedAt = seqs[i], outbox.StatusStored, created.UTC()
	}
	return nil
}

// nonNilBytes maps nil to an empty payload (the column is NOT NULL).
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// rowScanner is what readInserted needs of pgx.Rows and *sql.Rows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// readInserted sets Seq, Status and CreatedAt on msgs from RETURNING rows.
// The id is a uuid from pgx (binary, 16 bytes) and text from database/sql
// drivers (insertSQL's id::text); uuid.UUID scans both.
func readInserted(msgs []*outbox.Message, rows rowScanner) error {
	defer rows.Close()
	byID := make(map[uuid.UUID]*outbox.Message, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for rows.Next() {
		var (
			id      uuid.UUID
			seq     int64
			status  int32
			created time.Time
		)
		if err := rows.Scan(&id, &seq, &status, &created); err != nil {
			return err
		}
		if m := byID[id]; m != nil {
			m.Seq, m.Status, m.CreatedAt = seq, outbox.Status(status), created.UTC()
		}
	}
	return rows.Err()
}
