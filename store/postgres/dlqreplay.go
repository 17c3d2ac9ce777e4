package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
)

// msgIDOf casts an entry's message_id to the outbox id, NULL when it is not
// a UUID (entries added by hand may name anything).
func msgIDOf(col string) string {
	return `CASE WHEN ` + col + ` ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN ` + col + `::uuid END`
}

// resetSQL puts messages back in the outbox in place: not dead-lettered,
// attempts 0, StatusFailed and StatusPublished cleared (other completed
// flags kept), failure fields, due time, lease and stream release cleared.
// Each keeps its seq, so under strict ordering it is again where it was in
// its stream.
const resetSQL = `UPDATE {o} SET dead_lettered_at = NULL, attempts = 0, status = status & ~32772,
	failure_reason = NULL, error = NULL, fingerprint = NULL, first_failed_at = NULL,
	last_failed_at = NULL, scheduled_for = NULL, stream_released_at = NULL, published_at = NULL,
	instance_id = NULL, lease_expiry = NULL
WHERE id = ANY($1::uuid[])
RETURNING id`

// rewriteSQL writes messages whose row is gone again from their entries'
// copies, at the end of their streams.
const rewriteSQL = `INSERT INTO {o} (id, destination, stream, type, payload, headers, created_at)
SELECT m.id, m.destination, m.stream, m.type, m.payload, m.headers, {now}
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::jsonb[])
	WITH ORDINALITY AS m(id, destination, stream, type, payload, headers, n)
ORDER BY m.n`

// Replay sends the entry back for delivery and marks it replayed, in one
// transaction. An outbox message's row is reset in place (resetSQL), or
// written again from the entry when it is gone; a workflow entry (no
// MessageID) is only marked, for its owner to re-run. An entry replayed
// before is dlq.ErrAlreadyReplayed.
func (q *deadLetters) Replay(ctx context.Context, id string) error {
	return q.ReplayAs(ctx, id, dlq.Action{})
}

// ReplayAs is Replay recording who replayed the entry and why. A resolved
// entry is dlq.ErrResolved.
func (q *deadLetters) ReplayAs(ctx context.Context, id string, a dlq.Action) error {
	if !entryIDOK(id) {
		return fmt.Errorf("%w: %q", dlq.ErrNotFound, id)
	}
	a = a.Cleaned()
	defer q.s.wakeRelays(ctx)
	return retryTx(ctx, func() error {
		return pgx.BeginFunc(ctx, q.s.pool, func(tx pgx.Tx) error {
			e, err := scanEntry(tx.QueryRow(ctx, `SELECT `+dlCols+` FROM `+q.s.n.deadLetters+`
				WHERE id = $1 FOR UPDATE`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
			}
			if err != nil {
				return fmt.Errorf("postgres: dlq replay: %w", err)
			}
			if e.Replayed {
				return fmt.Errorf("%w: %s", dlq.ErrAlreadyReplayed, id)
			}
			if e.Status == dlq.StatusResolved {
				return fmt.Errorf("%w: %s", dlq.ErrResolved, id)
			}
			if err := q.refuseInFlight(ctx, tx, e); err != nil {
				return err
			}
			return q.replayTx(ctx, tx, []*dlq.Entry{e}, a)
		})
	})
}

// refuseInFlight returns dlq.ErrInFlight when e's message is still being
// delivered, and locks its row.
func (q *deadLetters) refuseInFlight(ctx context.Context, tx pgx.Tx, e *dlq.Entry) error {
	id, err := uuid.Parse(e.MessageID)
	if err != nil || e.MessageID == "" {
		return nil
	}
	var live bool
	err = tx.QueryRow(ctx, `SELECT `+q.s.inFlight("$1")+` FROM `+q.s.n.outbox+` o WHERE o.id = $2 FOR UPDATE`,
		q.s.now(), pgUUID(id)).Scan(&live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("postgres: dlq replay: %w", err)
	case live:
		return fmt.Errorf("%w: entry %s, message %s", dlq.ErrInFlight, e.ID, id)
	}
	return nil
}

// replayTx resets the entries' messages (resetSQL), writes again those
// whose row is gone (rewriteSQL) and marks the entries replayed. An entry
// whose MessageID is not a UUID (added by hand) is only marked.
func (q *deadLetters) replayTx(ctx context.Context, tx pgx.Tx, es []*dlq.Entry, a dlq.Action) error {
	if len(es) == 0 {
		return nil
	}
	now := q.s.now()
	ids := make([]string, len(es))
	byMsg := map[uuid.UUID]*dlq.Entry{}
	var msgIDs []string
	for i, e := range es {
		ids[i] = e.ID
		if id, err := uuid.Parse(e.MessageID); err == nil && e.MessageID != "" {
			if byMsg[id] == nil {
				msgIDs = append(msgIDs, id.String())
			}
			byMsg[id] = e
		}
	}
	if len(msgIDs) > 0 {
		r := strings.NewReplacer("{o}", q.s.n.outbox, "{now}", nowExpr)
		rows, err := tx.Query(ctx, r.Replace(resetSQL), msgIDs)
		if err != nil {
			return fmt.Errorf("postgres: dlq replay: %w", err)
		}
		reset, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("postgres: dlq replay: %w", err)
		}
		for _, id := range reset {
			delete(byMsg, id)
		}
		if err := q.rewrite(ctx, tx, r.Replace(rewriteSQL), now, msgIDs, byMsg); err != nil {
			return err
		}
	}
	var at time.Time
	err := tx.QueryRow(ctx, `WITH u AS (UPDATE `+q.s.n.deadLetters+` SET replayed = true, replayed_at = `+nowExpr+`,
			replayed_by = $3, replay_notes = $4,
			status = CASE WHEN status = 'pending' THEN 'replayed' ELSE status END
		WHERE id = ANY($2::text[]) RETURNING 1) SELECT `+nowExpr+` FROM u LIMIT 1`, now, ids, a.Actor, a.Notes).Scan(&at)
	if err != nil {
		return fmt.Errorf("postgres: dlq replay: %w", err)
	}
	at = at.UTC()
	for _, e := range es {
		e.Replayed, e.ReplayedAt, e.ReplayedBy, e.ReplayNotes = true, &at, a.Actor, a.Notes
		if e.Status == dlq.StatusPending {
			e.Status = dlq.StatusReplayed
		}
	}
	return nil
}

// rewrite inserts the messages of missing (by message id), in the order of
// order, from their entries.
func (q *deadLetters) rewrite(ctx context.Context, tx pgx.Tx, sql string, now *time.Time, order []string, missing map[uuid.UUID]*dlq.Entry) error {
	if len(missing) == 0 {
		return nil
	}
	var ids, dests, streams, types, headers []string
	var payloads [][]byte
	for _, s := range order {
		id := uuid.MustParse(s)
		e := missing[id]
		if e == nil {
			continue
		}
		h, err := encodeHeaders(e.Headers)
		if err != nil {
			return err
		}
		p := e.Payload
		if p == nil {
			p = []byte{}
		}
		ids, dests, streams, types = append(ids, s), append(dests, e.Destination), append(streams, e.Stream), append(types, e.Type)
		payloads, headers = append(payloads, p), append(headers, h)
	}
	if _, err := tx.Exec(ctx, sql, now, ids, dests, streams, types, payloads, headers); err != nil {
		return fmt.Errorf("postgres: dlq replay: re-enqueue: %w", err)
	}
	return nil
}

// ReplayMatching replays every pending, not yet replayed entry matching f
// (nil matches all), in one transaction, and returns them. With dryRun it
// changes nothing and returns what it would replay.
func (q *deadLetters) ReplayMatching(ctx context.Context, f *dlq.Filters, dryRun bool) ([]*dlq.Entry, error) {
	return q.ReplayMatchingAs(ctx, f, dryRun, dlq.Action{})
}

// ReplayMatchingAs is ReplayMatching recording a on each entry replayed.
func (q *deadLetters) ReplayMatchingAs(ctx context.Context, f *dlq.Filters, dryRun bool, a dlq.Action) ([]*dlq.Entry, error) {
	a = a.Cleaned()
	if !dryRun {
		defer q.s.wakeRelays(ctx)
	}
	if dryRun {
		return q.list(ctx, q.s.pool, f, true, false)
	}
	var out []*dlq.Entry
	err := retryTx(ctx, func() error {
		return pgx.BeginFunc(ctx, q.s.pool, func(tx pgx.Tx) error {
			var err error
			if out, err = q.list(ctx, tx, f, true, true); err != nil {
				return err
			}
			return q.replayTx(ctx, tx, out, a)
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// deleteEntriesSQL deletes the entries selected by {where} and the
// dead-lettered outbox rows that only those entries park (not replayed):
// the message is given up and no longer holds its stream. It returns the
// ids of the entries it deleted.
//
// Whether another entry still parks a message is asked once per deleted
// entry, of dead_letters_message_idx: a scalar subquery, which PostgreSQL
// never turns into a join, so no estimate can make it read the whole
// table instead (NOT EXISTS became an anti join: a scan of the table
// once a page, or, when statistics underestimated the entries deleted,
// as right after a bulk resolve, once per deleted entry: 68 s for a page
// of 500 at 200,000 entries). The condition that k.message_id is not
// empty is the partial index's predicate, which the query must state for
// the index to serve it. The entries the statement deletes are still
// visible to it; "NOT IN gone" (a hash built once) leaves them out.
const deleteEntriesSQL = `
WITH gone AS (
	DELETE FROM {d} WHERE {where} RETURNING id, message_id, replayed
), msgs AS (
	DELETE FROM {o} o USING gone
	WHERE NOT gone.replayed AND gone.message_id <> '' AND o.id = {msgid}
		AND o.dead_lettered_at IS NOT NULL
		AND (SELECT 1 FROM {d} k WHERE k.message_id <> '' AND k.message_id = gone.message_id
			AND NOT k.replayed AND k.id NOT IN (SELECT id FROM gone) LIMIT 1) IS NULL
	RETURNING 1
)
SELECT id FROM gone`

// purgePage is how many entries one statement of a purge deletes: each
// page is its own transaction, so a purge of a large queue neither holds
// its locks nor builds its change in one statement for its whole length.
const purgePage = 1000

// deleteSQL is deleteEntriesSQL for where; {d} in where is the dead
// letters' table.
func (q *deadLetters) deleteSQL(where string) string {
	where = strings.ReplaceAll(where, "{d}", q.s.n.deadLetters)
	return strings.NewReplacer("{d}", q.s.n.deadLetters, "{o}", q.s.n.outbox,
		"{msgid}", msgIDOf("gone.message_id"), "{where}", where).Replace(deleteEntriesSQL)
}

// deleteWhere runs deleteEntriesSQL (deleteSQL).
func (q *deadLetters) deleteWhere(ctx context.Context, where string, args ...any) ([]string, error) {
	sql := q.deleteSQL(where)
	var ids []string
	err := retryTx(ctx, func() error {
		rows, err := q.s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids, err
}

// purgeWhere deletes the entries matching cond a purgePage at a time, in
// dead-letter order, and returns how many it deleted.
func (q *deadLetters) purgeWhere(ctx context.Context, cond string, args ...any) (int, error) {
	where := purgePageWhere(cond)
	n := 0
	for {
		ids, err := q.deleteWhere(ctx, where, args...)
		n += len(ids)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
	}
}

// purgePageWhere selects the first purgePage entries matching cond, by
// primary key (an array, not "id IN (subquery)", which the planner could
// hash-join against a scan of the table).
func purgePageWhere(cond string) string {
	return `id = ANY (ARRAY(SELECT id FROM {d} WHERE ` + cond + ` ORDER BY failure_time, id LIMIT ` +
		strconv.Itoa(purgePage) + `))`
}

// Where clauses of deleteEntriesSQL: one entry (Delete) and a bulk
// delete's page (DeleteEntries).
const (
	deleteOneWhere  = `id = $1`
	deleteSomeWhere = `id = ANY($1::text[]) AND ($2 = '' OR status = $2)`
)

// Delete removes one entry, and its message when that is still
// dead-lettered.
func (q *deadLetters) Delete(ctx context.Context, id string) error {
	if !entryIDOK(id) {
		return fmt.Errorf("%w: %q", dlq.ErrNotFound, id)
	}
	ids, err := q.deleteWhere(ctx, deleteOneWhere, id)
	if err != nil {
		return fmt.Errorf("postgres: dlq delete: %w", err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
	}
	return nil
}

// DeleteEntries removes those of ids whose status is still from (any when
// from is empty), and their messages that are still dead-lettered, in one
// statement; see dlq.Operator.
func (q *deadLetters) DeleteEntries(ctx context.Context, ids []string, from dlq.Status) ([]string, error) {
	ids = validEntryIDs(ids)
	if len(ids) == 0 {
		return []string{}, nil
	}
	done, err := q.deleteWhere(ctx, deleteSomeWhere, ids, string(from))
	if err != nil {
		return nil, fmt.Errorf("postgres: dlq delete: %w", err)
	}
	return done, nil
}

// Purge removes every entry, and their messages that are still
// dead-lettered, a page at a time.
func (q *deadLetters) Purge(ctx context.Context) error {
	if _, err := q.purgeWhere(ctx, `true`); err != nil {
		return fmt.Errorf("postgres: dlq purge: %w", err)
	}
	return nil
}

// PurgeBefore removes the entries dead-lettered before t, and their
// messages that are still dead-lettered, a page at a time, and returns how
// many entries it removed (those of the pages done when it fails too).
func (q *deadLetters) PurgeBefore(ctx context.Context, t time.Time) (int, error) {
	n, err := q.purgeWhere(ctx, `failure_time < $1`, t)
	if err != nil {
		return n, fmt.Errorf("postgres: dlq purge before: %w", err)
	}
	return n, nil
}
