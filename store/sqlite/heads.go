package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The claim reads stream heads, never the rows held behind them (migration
// 0004; docs/claim.md). Ordered messages are claimed through the streams
// table: a stream is ready when a write or a change may have freed one of
// its messages, or when a lease or retry time it waits for has come; a claim
// reads a ready stream from its head and stops at the first message that
// holds back the rest. Unordered messages (no stream, or ordering none)
// are claimed by their own index. SQLite runs one writer at a time, so this
// runs inside the batch's write transaction.

const (
	// promoteStreams makes ready the streams whose wait time came.
	promoteStreams = `UPDATE {{prefix}}streams SET ready = 1, wait_until = NULL, turn = (SELECT n FROM {{prefix}}stream_turn)
WHERE (destination, stream) IN (SELECT destination, stream FROM {{prefix}}streams
  WHERE ready = 0 AND wait_until <= :now ORDER BY wait_until LIMIT 1000)`

	// readyDestination is the first destination after :after with a ready
	// stream (a skip scan of streams_ready).
	readyDestination = `SELECT destination FROM {{prefix}}streams WHERE ready = 1 AND destination > :after
ORDER BY destination LIMIT 1`

	// unorderedDestination is the first destination after :after with a
	// fresh unordered message (a skip scan of outbox_unordered).
	unorderedDestination = `SELECT destination FROM {{prefix}}outbox
WHERE dead_lettered_at IS NULL AND (status & 4) = 0 AND instance_id IS NULL AND scheduled_for IS NULL
  AND (stream = '' OR ordering = 'none') AND destination > :after
ORDER BY destination LIMIT 1`

	// dueDestinations are the destinations of unordered retries due now
	// (a skip scan of outbox_due, migration 0017: two probes per
	// destination that has any, whatever the rows of other destinations)
	// and of unordered leases that lapsed (every lapsed lease, through
	// outbox_lease: leases are few, the lapsed ones fewer, and an index of
	// unordered leases by destination cost every unordered message an
	// index entry written at its lease and removed at its delivery, about
	// a fifth of SQLite's drain rate). Neither stops at the first 1,000
	// rows: published retries kept under Retention, or due retries and
	// lapsed leases of a destination the claim excludes, filled them and
	// hid another destination's.
	dueDestinations = `WITH RECURSIVE
due(name) AS (
  SELECT (SELECT destination FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_due WHERE ` + dueRow + `
    ORDER BY destination LIMIT 1)
  UNION ALL
  SELECT (SELECT destination FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_due WHERE ` + dueRow + `
    AND destination > due.name ORDER BY destination LIMIT 1)
  FROM due WHERE due.name IS NOT NULL)
SELECT name FROM due WHERE name IS NOT NULL AND EXISTS (
  SELECT 1 FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_due
  WHERE ` + dueRow + ` AND destination = due.name AND scheduled_for <= :now)
UNION
SELECT destination FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_lease
WHERE instance_id IS NOT NULL AND lease_expiry <= :lapse AND dead_lettered_at IS NULL AND (status & 4) = 0
  AND ` + unorderedRow + ` AND coalesce(scheduled_for, 0) <= :now`

	// dueRow is outbox_due's predicate: an unordered retry not leased.
	dueRow = `(status & 4) = 0 AND dead_lettered_at IS NULL AND instance_id IS NULL AND scheduled_for IS NOT NULL
    AND ` + unorderedRow

	// unorderedRow says a row is unordered without an OR term: SQLite's
	// planner, given INDEXED BY, can spend minutes on OR terms it tries
	// to serve from the forced index.
	unorderedRow = `(CASE WHEN stream = '' THEN 1 WHEN ordering = 'none' THEN 1 ELSE 0 END) = 1`

	// unorderedCandidates are a destination's claimable unordered
	// messages: fresh by outbox_unordered, due retries by outbox_due,
	// lapsed leases by outbox_lease.
	unorderedCandidates = `SELECT seq FROM (
  SELECT seq FROM (SELECT seq FROM {{prefix}}outbox
    WHERE destination = :dest AND dead_lettered_at IS NULL AND (status & 4) = 0
      AND instance_id IS NULL AND scheduled_for IS NULL AND (stream = '' OR ordering = 'none')
    ORDER BY seq LIMIT :limit)
  UNION ALL
  SELECT seq FROM (SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_due
    WHERE destination = :dest AND scheduled_for <= :now AND ` + dueRow + `
    ORDER BY scheduled_for LIMIT :limit)
  UNION ALL
  SELECT seq FROM (SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_lease
    WHERE instance_id IS NOT NULL AND lease_expiry <= :lapse AND destination = :dest
      AND dead_lettered_at IS NULL AND (status & 4) = 0
      AND coalesce(scheduled_for, 0) <= :now AND ` + unorderedRow + `
    ORDER BY lease_expiry LIMIT :limit))
ORDER BY seq LIMIT :limit`

	// readyStreams are a destination's ready streams, oldest turn first.
	readyStreams = `SELECT stream, head_seq FROM {{prefix}}streams
WHERE destination = :dest AND ready = 1 ORDER BY turn LIMIT :limit`
)

// leaseSeqs leases the chosen messages. A payload or headers larger
// than any message may carry (plain SQL does not check them) are not
// read: the sizes, the first two columns, say so, and the row is
// quarantined (store.CheckClaimedSize).
var leaseSeqs = `UPDATE {{prefix}}outbox SET instance_id = :instance, lease_expiry = :expiry
WHERE seq IN (SELECT value FROM json_each(:seqs))
RETURNING octet_length(payload), octet_length(headers), ` + claimedColumns

// claimedColumns are messageColumns with the payload and headers left out
// (NULL) when too large to read.
var claimedColumns = strings.NewReplacer(
	"payload,", fmt.Sprintf("CASE WHEN octet_length(payload) <= %d THEN payload END,", outbox.MaxLimits.MaxPayloadBytes),
	"headers,", fmt.Sprintf("CASE WHEN octet_length(headers) <= %d THEN headers END,", store.MaxStoredHeaderBytes),
).Replace(messageColumns)

// writerStmts caches statements prepared on each store's writer
// connection: the claim's dozen small ones, each outcome's savepoint and
// delete, and Enqueue's insert. Preparing them on every call would cost
// more than running them (an outbox write compiles its triggers).
var writerStmts sync.Map // stmtKey -> *sql.Stmt

type stmtKey struct {
	s *Store
	q string
}

// queryCached runs q (a statement of the writer's) in tx, through the store's cached
// prepared statement once there is one.
func (s *Store) queryCached(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st := s.cachedStmt(q); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, s.sql(q), args...)
}

// queryRowCached is queryCached for a statement of one row.
func (s *Store) queryRowCached(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.cachedStmt(q); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, s.sql(q), args...)
}

func (s *Store) execCached(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
	var err error
	if st := s.cachedStmt(q); st != nil {
		_, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	} else {
		_, err = tx.ExecContext(ctx, s.sql(q), args...)
	}
	return err
}

// cachedStmt returns q's cached statement, or nil after starting to prepare
// it: the writer's one connection is busy with the claim's transaction, so
// the statement is prepared once that ends.
func (s *Store) cachedStmt(q string) *sql.Stmt {
	k := stmtKey{s, q}
	if st, ok := writerStmts.Load(k); ok {
		return st.(*sql.Stmt)
	}
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	if s.closing {
		return nil
	}
	if st, ok := writerStmts.LoadOrStore(k, (*sql.Stmt)(nil)); ok {
		return st.(*sql.Stmt)
	}
	s.prep.Add(1)
	go func() {
		defer s.prep.Done()
		st, err := s.w.PrepareContext(s.prepCtx, s.sql(q))
		if err != nil {
			writerStmts.Delete(k)
			return
		}
		writerStmts.Store(k, st)
	}()
	return nil
}

// forgetCachedStmts closes and drops s's cached statements.
func (s *Store) forgetCachedStmts() {
	writerStmts.Range(func(k, v any) bool {
		if k.(stmtKey).s == s {
			if st := v.(*sql.Stmt); st != nil {
				st.Close()
			}
			writerStmts.Delete(k)
		}
		return true
	})
}

// headStream is a stream read by a claim.
type headStream struct {
	dest, key string
	first     int64 // the head's seq; 0: the stream is empty
	wait      int64 // earliest lease or retry time seen; 0: none
	more      bool  // more was claimable than the claim took
	cands     []int64
}

// soonest makes t the stream's wake-up time if it comes before the one
// it has.
func (h *headStream) soonest(t sql.NullInt64) {
	if t.Valid && (h.wait == 0 || t.Int64 < h.wait) {
		h.wait = t.Int64
	}
}

// candidate is a message a claim may lease.
type candidate struct {
	seq    int64
	dest   int // index in caps
	stream int // index in streams + 1; 0: unordered
}

// pickHeads chooses the messages to lease under req's rules and limits and
// updates the streams it read; it returns the chosen seqs in order.
func (s *Store) pickHeads(ctx context.Context, tx *sql.Tx, req store.ClaimRequest, at claimAt, expiry int64) ([]int64, error) {
	if err := s.execCached(ctx, tx, promoteStreams, sql.Named("now", at.now)); err != nil {
		return nil, fmt.Errorf("promote streams: %w", err)
	}
	dests, err := s.claimDestinations(ctx, tx, req, at)
	if err != nil {
		return nil, err
	}
	var (
		cands   []candidate
		caps    []int
		streams []*headStream
	)
	for _, dest := range dests {
		limit := req.Limit
		if c, ok := req.PerDestination[dest]; ok {
			limit = min(limit, max(c, 0))
		}
		if limit <= 0 {
			continue
		}
		caps = append(caps, limit)
		d := len(caps) - 1
		seqs, err := s.int64s(ctx, tx, unorderedCandidates, sql.Named("dest", dest), sql.Named("now", at.now), sql.Named("lapse", at.lapse), sql.Named("limit", limit))
		if err != nil {
			return nil, fmt.Errorf("unordered candidates: %w", err)
		}
		for _, q := range seqs {
			cands = append(cands, candidate{seq: q, dest: d})
		}
		read, err := s.readStreams(ctx, tx, dest, s.modeOf(dest), limit, at)
		if err != nil {
			return nil, err
		}
		for _, h := range read {
			streams = append(streams, h)
			for _, q := range h.cands {
				cands = append(cands, candidate{seq: q, dest: d, stream: len(streams)})
			}
		}
	}
	// The lowest seqs win, at most each destination's cap, and while
	// their bytes come to no more than req.MaxBytes.
	slices.SortFunc(cands, func(a, b candidate) int { return int(a.seq - b.seq) })
	taken := make([]int, len(caps))
	var won []candidate
	for _, c := range cands {
		if len(won) == req.Limit {
			break
		}
		if taken[c.dest] == caps[c.dest] {
			continue
		}
		taken[c.dest]++
		won = append(won, c)
	}
	if req.MaxBytes > 0 && len(won) > 0 {
		if won, err = s.withinBytes(ctx, tx, won, req.MaxBytes, req.FirstAnySize); err != nil {
			return nil, err
		}
	}
	got := make([]int, len(streams)+1)
	chosen := make([]int64, len(won))
	for i, c := range won {
		got[c.stream]++
		chosen[i] = c.seq
	}
	for i, h := range streams {
		if err := s.settleStream(ctx, tx, h, got[i+1], expiry); err != nil {
			return nil, err
		}
	}
	return chosen, nil
}

// sizeSeqs reads what ClaimRequest.MaxBytes counts of the messages of the
// seqs given: the payload's length and the headers' JSON (a blob's length
// is read without its content).
const sizeSeqs = `SELECT seq, coalesce(octet_length(payload), 0), coalesce(octet_length(headers), 0) FROM {{prefix}}outbox
WHERE seq IN (SELECT value FROM json_each(:seqs))`

// withinBytes returns the longest prefix of won (in seq order) whose bytes
// (store.ClaimedBytes) come to at most budget; with firstAny, at least its
// first. Without firstAny, a message larger than budget is passed over,
// with the later messages of its stream, so that what is taken of each
// stream is still a prefix: it held back every claim behind it in seq
// order, of every destination, while the relay held another such message.
func (s *Store) withinBytes(ctx context.Context, tx *sql.Tx, won []candidate, budget int64, firstAny bool) ([]candidate, error) {
	seqs := make([]int64, len(won))
	for i, c := range won {
		seqs[i] = c.seq
	}
	rows, err := s.queryCached(ctx, tx, sizeSeqs, sql.Named("seqs", seqList(seqs)))
	if err != nil {
		return nil, fmt.Errorf("claim sizes: %w", err)
	}
	size := make(map[int64]int64, len(won))
	for rows.Next() {
		var seq, payload, headers int64
		if err := rows.Scan(&seq, &payload, &headers); err != nil {
			rows.Close()
			return nil, err
		}
		size[seq] = store.ClaimedBytes(payload, headers)
	}
	if err := errors2(rows); err != nil {
		return nil, fmt.Errorf("claim sizes: %w", err)
	}
	// Without firstAny a message larger than the budget is passed over,
	// and the later ones of its stream with it; the others go on.
	var total int64
	var held map[int]bool // streams passed over from a large message on; nil until one is
	kept := won[:0]
	for i, c := range won {
		switch n := size[c.seq]; {
		case held[c.stream]:
		case n > budget && !firstAny:
			if c.stream > 0 {
				if held == nil {
					held = map[int]bool{}
				}
				held[c.stream] = true
			}
		case total+n > budget && !(firstAny && i == 0):
			return kept, nil
		default:
			total += n
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// settleStream records what a claim saw of h: gone when empty; ready for
// its next turn when it had more to give; waiting otherwise.
func (s *Store) settleStream(ctx context.Context, tx *sql.Tx, h *headStream, got int, expiry int64) error {
	var err error
	switch {
	case h.first == 0:
		err = s.execCached(ctx, tx, `DELETE FROM {{prefix}}streams WHERE destination = ? AND stream = ?`, h.dest, h.key)
	case got < len(h.cands):
		// Cut by the limit: it keeps its turn.
		err = s.execCached(ctx, tx, `UPDATE {{prefix}}streams SET head_seq = ? WHERE destination = ? AND stream = ?`,
			h.first, h.dest, h.key)
	case h.more:
		// Behind every ready stream (ties with the newest turn are fine).
		err = s.execCached(ctx, tx, `UPDATE {{prefix}}streams SET head_seq = ?, turn = (SELECT n FROM {{prefix}}stream_turn)
			WHERE destination = ? AND stream = ?`, h.first, h.dest, h.key)
	default:
		wait := h.wait
		if got > 0 && (wait == 0 || expiry < wait) {
			wait = expiry
		}
		var w any
		if wait != 0 {
			w = wait
		}
		err = s.execCached(ctx, tx, `UPDATE {{prefix}}streams SET head_seq = ?, ready = 0, wait_until = ?
			WHERE destination = ? AND stream = ?`, h.first, w, h.dest, h.key)
	}
	if err != nil {
		return fmt.Errorf("settle stream %s/%s: %w", h.dest, h.key, err)
	}
	return nil
}

// minStreamShare is the least of a claim's limit that readStreams offers
// each stream before it has offered every ready stream some: a small claim
// still takes a stream's run of messages in seq order, and one stream's
// share is worth the read it costs.
const minStreamShare = 16

// readStreams reads dest's ready streams, oldest turn first, each from its
// head, collecting claimable messages up to limit in all. The limit is
// shared out: each stream is offered limit divided among the ready streams
// (at least minStreamShare), and what they leave goes, in a second pass,
// to the streams that had more. Delivery within a strict stream is one
// message at a time, so a claim filled from one deep stream while others
// wait would leave a relay's workers idle behind it.
func (s *Store) readStreams(ctx context.Context, tx *sql.Tx, dest, mode string, limit int, at claimAt) ([]*headStream, error) {
	// More streams than the limit: a ready stream may give nothing (its
	// head came due later than it woke), and a small claim, such as a
	// breaker's probe of one, must not stop there.
	rows, err := s.queryCached(ctx, tx, readyStreams, sql.Named("dest", dest), sql.Named("limit", limit+32))
	if err != nil {
		return nil, fmt.Errorf("ready streams: %w", err)
	}
	var out []*headStream
	var heads []int64
	for rows.Next() {
		h := &headStream{dest: dest}
		var head int64
		if err := rows.Scan(&h.key, &head); err != nil {
			rows.Close()
			return nil, err
		}
		out, heads = append(out, h), append(heads, head)
	}
	if err := errors2(rows); err != nil {
		return nil, fmt.Errorf("ready streams: %w", err)
	}
	left, share := limit, limit
	if n := len(out); n > 1 {
		share = min(max((limit+n-1)/n, minStreamShare), limit)
	}
	for i, h := range out {
		if left <= 0 {
			out = out[:i]
			break
		}
		if err := s.readStream(ctx, tx, h, heads[i], mode, min(share, left), at); err != nil {
			return nil, err
		}
		left -= len(h.cands)
	}
	for _, h := range out {
		if left <= 0 {
			break
		}
		if !h.more {
			continue
		}
		// Cut at its share: it reads on past its last candidate.
		h.more = false
		had := len(h.cands)
		if err := s.readStream(ctx, tx, h, h.cands[had-1]+1, mode, had+left, at); err != nil {
			return nil, err
		}
		left -= len(h.cands) - had
	}
	return out, nil
}

// directDestinations is the most req.Destinations a claim reads one by
// one. Reading a destination costs two queries whatever it holds, so a
// relay of 2,000 destinations, most of them idle, spent 4,000 queries on
// each claim (about 60 times the claim of its few busy ones); past this
// many, the claim reads only those of them the skip scans find with work,
// a few index probes for each destination that has some.
const directDestinations = 16

// claimDestinations are the destinations a claim looks at, in name order:
// those with a ready stream or a claimable unordered message, of
// req.Destinations when set (all of them when they are few); never
// req.ExcludeDestinations.
func (s *Store) claimDestinations(ctx context.Context, tx *sql.Tx, req store.ClaimRequest, at claimAt) ([]string, error) {
	set := map[string]bool{}
	if len(req.Destinations) > 0 && len(req.Destinations) <= directDestinations {
		for _, d := range req.Destinations {
			set[d] = true
		}
	} else {
		for _, q := range []string{readyDestination, unorderedDestination} {
			after := ""
			for {
				ds, err := s.strings(ctx, tx, q, sql.Named("after", after))
				if err != nil {
					return nil, fmt.Errorf("claim destinations: %w", err)
				}
				if len(ds) == 0 {
					break
				}
				set[ds[0]], after = true, ds[0]
			}
		}
		ds, err := s.strings(ctx, tx, dueDestinations, sql.Named("now", at.now), sql.Named("lapse", at.lapse))
		if err != nil {
			return nil, fmt.Errorf("claim destinations: %w", err)
		}
		for _, d := range ds {
			set[d] = true
		}
		if len(req.Destinations) > 0 {
			asked := make(map[string]bool, len(req.Destinations))
			for _, d := range req.Destinations {
				asked[d] = true
			}
			maps.DeleteFunc(set, func(d string, _ bool) bool { return !asked[d] })
		}
	}
	for _, d := range req.ExcludeDestinations {
		delete(set, d)
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

// modeOf is the ordering mode of dest's policy.
func (s *Store) modeOf(dest string) string {
	if p, ok := s.cfg.Policies[dest]; ok && p.Ordering != "" {
		return string(p.Ordering)
	}
	return string(s.cfg.DefaultPolicy.Ordering)
}

func (s *Store) int64s(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]int64, error) {
	return column[int64](s.queryCached(ctx, tx, q, args...))
}

func (s *Store) strings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	return column[string](s.queryCached(ctx, tx, q, args...))
}

// column reads a one-column result.
func column[T any](rows *sql.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, v)
	}
	return out, errors2(rows)
}

// errors2 closes rows and returns the first error of iterating or closing.
func errors2(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// seqList spells seqs as a JSON array for json_each.
func seqList(seqs []int64) string {
	parts := make([]string, len(seqs))
	for i, q := range seqs {
		parts[i] = strconv.FormatInt(q, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}
