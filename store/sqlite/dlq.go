package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
)

// deadLetters is the store's dlq.Operator, on the dead_letters table.
//
// Replaying a message entry resets its outbox row in the same transaction:
// it is no longer dead-lettered, its attempts are zero, StatusFailed (and
// StatusPublished) are cleared while other completed flags stay, and its
// failure fields, due time, lease and stream release are cleared. The row
// keeps its seq, so it goes back to its place in its stream. If the row is
// gone it is written again from the entry's copy, at the end of its stream.
// Entries without a MessageID (workflow tasks) are only marked replayed:
// their owner re-runs them. Only pending entries are replayed; Count counts
// pending entries alone.
//
// Deleting or purging an entry that still parks its message (not replayed)
// deletes the dead-lettered outbox row too: the message is given up and no
// longer holds its stream.
type deadLetters struct{ s *Store }

var _ dlq.Operator = (*deadLetters)(nil)

func (d *deadLetters) Add(ctx context.Context, e *dlq.Entry) error {
	if e == nil {
		return errors.New("sqlite: dlq add: nil entry")
	}
	return d.s.write(ctx, func(tx *sql.Tx) error { return d.s.insertEntry(ctx, tx, e, d.s.now()) })
}

func (d *deadLetters) Get(ctx context.Context, id string) (*dlq.Entry, error) {
	var e *dlq.Entry
	err := retryBusy(ctx, func() error {
		var err error
		e, err = getEntry(ctx, d.s, d.s.r, id)
		return err
	})
	return e, err
}

func getEntry(ctx context.Context, s *Store, q querier, id string) (*dlq.Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, s.sql(`SELECT `+entryColumns+` FROM {{prefix}}dead_letters WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
	}
	return e, err
}

func (d *deadLetters) List(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
	var out []*dlq.Entry
	err := retryBusy(ctx, func() error {
		var err error
		out, err = d.s.listEntries(ctx, d.s.r, f, false)
		return err
	})
	return out, err
}

func (d *deadLetters) Replay(ctx context.Context, id string) error {
	return d.ReplayAs(ctx, id, dlq.Action{})
}

// ReplayAs replays a pending entry, recording a.
func (d *deadLetters) ReplayAs(ctx context.Context, id string, a dlq.Action) error {
	a = a.Cleaned()
	defer d.s.hub.Notify()
	return d.s.write(ctx, func(tx *sql.Tx) error {
		e, err := getEntry(ctx, d.s, tx, id)
		if err != nil {
			return err
		}
		if e.Replayed {
			return fmt.Errorf("%w: %s", dlq.ErrAlreadyReplayed, id)
		}
		if e.Status == dlq.StatusResolved {
			return fmt.Errorf("%w: %s", dlq.ErrResolved, id)
		}
		if msgID, err := uuid.Parse(e.MessageID); err == nil && e.MessageID != "" {
			lapse, err := d.s.lapseAt(ctx, tx, d.s.now())
			if err != nil {
				return err
			}
			var live bool
			err = tx.QueryRowContext(ctx, d.s.sql(`SELECT instance_id IS NOT NULL AND coalesce(lease_expiry, 0) > ?
				FROM {{prefix}}outbox WHERE id = ?`), lapse, msgID.String()).Scan(&live)
			switch {
			case err != nil && !errors.Is(err, sql.ErrNoRows):
				return err
			case live:
				return fmt.Errorf("%w: entry %s, message %s", dlq.ErrInFlight, id, msgID)
			}
		}
		return d.replay(ctx, tx, e, d.s.now(), a)
	})
}

// replay resets e's message and marks e replayed by a.
func (d *deadLetters) replay(ctx context.Context, tx *sql.Tx, e *dlq.Entry, now time.Time, a dlq.Action) error {
	return d.replayPage(ctx, tx, []*dlq.Entry{e}, now, a)
}

// replayPage resets the messages of es and marks es replayed by a, in a
// few statements for the whole page: a bulk replay holds SQLite's one
// writer while it runs, and two statements an entry (each compiled with
// the outbox's check triggers) held it 150-450 ms a page of 500. A
// message no longer in the outbox is written again from its entry. An
// entry whose MessageID is not a UUID (added by hand) is only marked, as
// on PostgreSQL: the outbox keeps no such id, and writing one failed the
// replay, and with it every bulk replay whose page held the entry.
func (d *deadLetters) replayPage(ctx context.Context, tx *sql.Tx, es []*dlq.Entry, now time.Time, a dlq.Action) error {
	s := d.s
	var msgIDs []string
	for _, e := range es {
		if id, err := uuid.Parse(e.MessageID); err == nil && e.MessageID != "" {
			msgIDs = append(msgIDs, id.String())
		}
	}
	reset := make(map[string]bool, len(msgIDs))
	for _, args := range idChunks(msgIDs) {
		rows, err := tx.QueryContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET
			dead_lettered_at = NULL, attempts = 0, status = status & ~32772, failure_reason = NULL, error = NULL,
			fingerprint = NULL, first_failed_at = NULL, last_failed_at = NULL, scheduled_for = NULL,
			stream_released_at = NULL, published_at = NULL, instance_id = NULL, lease_expiry = NULL
			WHERE id IN (`+placeholders(len(args))+`) RETURNING id`), args...)
		if err != nil {
			return err
		}
		ids, err := scanIDs(rows)
		if err != nil {
			return err
		}
		for _, id := range ids {
			reset[id] = true
		}
	}
	for _, e := range es {
		id, err := uuid.Parse(e.MessageID)
		if err != nil || e.MessageID == "" || reset[id.String()] {
			continue
		}
		headers, err := encodeHeaders(e.Headers)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}outbox
			(id, destination, stream, type, payload, headers, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			id.String(), e.Destination, e.Stream, e.Type, blob(e.Payload), headers, now.UnixMilli()); err != nil {
			return fmt.Errorf("re-enqueue %s: %w", e.MessageID, err)
		}
		reset[id.String()] = true // a second entry of the same message finds it written
	}
	entryIDs := make([]string, len(es))
	for i, e := range es {
		entryIDs[i] = e.ID
	}
	for _, args := range idChunks(entryIDs) {
		_, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}dead_letters SET replayed = 1, replayed_at = ?,
			replayed_by = ?, replay_notes = ?, status = CASE WHEN status = 'pending' THEN 'replayed' ELSE status END
			WHERE id IN (`+placeholders(len(args))+`)`), append([]any{now.UnixMilli(), a.Actor, a.Notes}, args...)...)
		if err != nil {
			return err
		}
	}
	t := time.UnixMilli(now.UnixMilli()).UTC()
	for _, e := range es {
		e.Replayed, e.ReplayedAt, e.ReplayedBy, e.ReplayNotes = true, &t, a.Actor, a.Notes
		if e.Status == dlq.StatusPending {
			e.Status = dlq.StatusReplayed
		}
	}
	return nil
}

func (d *deadLetters) ReplayMatching(ctx context.Context, f *dlq.Filters, dryRun bool) ([]*dlq.Entry, error) {
	return d.ReplayMatchingAs(ctx, f, dryRun, dlq.Action{})
}

// ReplayMatchingAs replays the pending entries matching f, recording a.
func (d *deadLetters) ReplayMatchingAs(ctx context.Context, f *dlq.Filters, dryRun bool, a dlq.Action) ([]*dlq.Entry, error) {
	a = a.Cleaned()
	if !dryRun {
		defer d.s.hub.Notify()
	}
	if dryRun {
		var out []*dlq.Entry
		err := retryBusy(ctx, func() error {
			var err error
			out, err = d.s.listEntries(ctx, d.s.r, f, true)
			return err
		})
		return out, err
	}
	// The page is read, payloads and all, before the writer is taken; in
	// the write transaction only its ids are read again (through the
	// filters' indexes) to check that the page is still what the filter
	// selects. When it is not (an entry replayed, resolved, deleted or
	// added meanwhile), the page is read again inside the transaction.
	var cands []*dlq.Entry
	err := retryBusy(ctx, func() error {
		var err error
		cands, err = d.s.listEntries(ctx, d.s.r, f, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	if afterRead != nil {
		afterRead()
	}
	var out []*dlq.Entry
	err = d.s.write(ctx, func(tx *sql.Tx) error {
		ids, err := d.s.listEntryIDs(ctx, tx, f, true)
		if err != nil {
			return err
		}
		out = cands
		if !sameIDs(ids, cands) {
			if out, err = d.s.listEntries(ctx, tx, f, true); err != nil {
				return err
			}
		}
		if err := d.replayPage(ctx, tx, out, d.s.now(), a); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sameIDs reports whether es are the entries ids names, in that order.
func sameIDs(ids []string, es []*dlq.Entry) bool {
	if len(ids) != len(es) {
		return false
	}
	for i, e := range es {
		if e.ID != ids[i] {
			return false
		}
	}
	return true
}

func (d *deadLetters) Resolve(ctx context.Context, id, notes string) error {
	return d.ResolveAs(ctx, id, dlq.Action{Notes: notes})
}

// ResolveAs resolves the entry, recording a.
func (d *deadLetters) ResolveAs(ctx context.Context, id string, a dlq.Action) error {
	a = a.Cleaned()
	return d.s.write(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, d.s.sql(`UPDATE {{prefix}}dead_letters
			SET status = 'resolved', resolution_notes = ?, resolved_by = ?, resolved_at = ? WHERE id = ?`),
			a.Notes, a.Actor, d.s.now().UnixMilli(), id))
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
		}
		return err
	})
}

// ResolveEntriesAs resolves those of ids whose status is still from, in
// one transaction; see dlq.Operator.
func (d *deadLetters) ResolveEntriesAs(ctx context.Context, ids []string, from dlq.Status, a dlq.Action) ([]string, error) {
	a = a.Cleaned()
	var done []string
	err := d.s.write(ctx, func(tx *sql.Tx) error {
		done = []string{}
		for _, chunk := range idChunks(ids) {
			rows, err := tx.QueryContext(ctx, d.s.sql(`UPDATE {{prefix}}dead_letters
				SET status = 'resolved', resolution_notes = ?, resolved_by = ?, resolved_at = ?
				WHERE id IN (`+placeholders(len(chunk))+`) AND status = ? RETURNING id`),
				append(append([]any{a.Notes, a.Actor, d.s.now().UnixMilli()}, chunk...), string(from))...)
			if err != nil {
				return err
			}
			got, err := scanIDs(rows)
			if err != nil {
				return err
			}
			done = append(done, got...)
		}
		return nil
	})
	return done, wrap("dlq resolve", err)
}

// DeleteEntries removes those of ids whose status is still from (any when
// from is empty), and their messages that are still dead-lettered, in one
// transaction; see dlq.Operator.
func (d *deadLetters) DeleteEntries(ctx context.Context, ids []string, from dlq.Status) ([]string, error) {
	var done []string
	err := d.s.write(ctx, func(tx *sql.Tx) error {
		done = []string{}
		for _, chunk := range idChunks(ids) {
			got, err := d.remove(ctx, tx, "id IN ("+placeholders(len(chunk))+") AND (? = '' OR status = ?)",
				append(chunk, string(from), string(from))...)
			if err != nil {
				return err
			}
			done = append(done, got...)
		}
		return nil
	})
	return done, wrap("dlq delete", err)
}

// idChunk bounds the ids one statement names, well under SQLite's limit
// on a statement's parameters.
const idChunk = 500

// idChunks splits ids into statement arguments of at most idChunk each.
func idChunks(ids []string) [][]any {
	var out [][]any
	for start := 0; start < len(ids); start += idChunk {
		part := ids[start:min(start+idChunk, len(ids))]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		out = append(out, args)
	}
	return out
}

// placeholders is "?, ?, …" for n parameters.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// scanIDs reads a column of ids and closes rows.
func scanIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (d *deadLetters) Delete(ctx context.Context, id string) error {
	return d.s.write(ctx, func(tx *sql.Tx) error {
		gone, err := d.remove(ctx, tx, "id = ?", id)
		if err == nil && len(gone) == 0 {
			err = fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
		}
		return err
	})
}

// Purge removes every entry, and their messages that are still
// dead-lettered, a purgePage at a time.
func (d *deadLetters) Purge(ctx context.Context) error {
	_, err := d.purgeWhere(ctx, "1 = 1")
	return err
}

// PurgeBefore removes the entries dead-lettered before t, a purgePage at
// a time, and returns how many it removed (those of the pages done when it
// fails too).
func (d *deadLetters) PurgeBefore(ctx context.Context, t time.Time) (int, error) {
	return d.purgeWhere(ctx, "failure_time < ?", t.UnixMilli())
}

// purgePage is how many entries one transaction of a purge deletes, so
// that a purge of a large queue never holds the database's one writer
// for its whole length: the relays' writes go on between pages.
const purgePage = 1000

// purgeWhere deletes the entries matching cond a purgePage at a time, in
// dead-letter order, and returns how many it deleted.
func (d *deadLetters) purgeWhere(ctx context.Context, cond string, args ...any) (int, error) {
	page := "id IN (SELECT id FROM {{prefix}}dead_letters WHERE " + cond +
		" ORDER BY failure_time, id LIMIT " + strconv.Itoa(purgePage) + ")"
	n := 0
	for {
		var k int
		err := d.s.write(ctx, func(tx *sql.Tx) error {
			gone, err := d.remove(ctx, tx, page, args...)
			k = len(gone)
			return err
		})
		n += k
		if err != nil || k == 0 {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
	}
}

// remove deletes the entries matching cond, then the dead-lettered outbox
// rows of those not replayed that no entry left parks, and returns the ids
// of the entries it deleted. Its cost follows the entries deleted: the
// messages are found by id and the entries that may still park them
// through dead_letters_message, never by reading the entries kept.
func (d *deadLetters) remove(ctx context.Context, tx *sql.Tx, cond string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, d.s.sql(`DELETE FROM {{prefix}}dead_letters WHERE `+cond+`
		RETURNING coalesce(id, ''), message_id, replayed IS NOT 0`), args...) // a NULL id or a replayed flag not 0 or 1, written with plain SQL, read as scanEntry reads them
	if err != nil {
		return nil, err
	}
	ids, msgs, seen := []string{}, []string{}, map[string]bool{}
	for rows.Next() {
		var id, msg string
		var replayed bool
		if err := rows.Scan(&id, &msg, &replayed); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
		if !replayed && msg != "" && !seen[msg] {
			seen[msg] = true
			msgs = append(msgs, msg)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, chunk := range idChunks(msgs) {
		if _, err := tx.ExecContext(ctx, d.s.sql(`DELETE FROM {{prefix}}outbox
			WHERE id IN (`+placeholders(len(chunk))+`) AND dead_lettered_at IS NOT NULL
			  AND NOT EXISTS (SELECT 1 FROM {{prefix}}dead_letters k
				WHERE k.message_id = {{prefix}}outbox.id AND k.message_id <> '' AND k.replayed = 0)`),
			chunk...); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func (d *deadLetters) Count(ctx context.Context) (int, error) {
	var n int
	err := retryBusy(ctx, func() error {
		return d.s.r.QueryRowContext(ctx, d.s.sql(`SELECT count(*) FROM {{prefix}}dead_letters WHERE status = 'pending'`)).Scan(&n)
	})
	return n, err
}

// afterRead, when set (by tests), runs after a bulk replay has read its
// page and before it takes the writer.
var afterRead func()
