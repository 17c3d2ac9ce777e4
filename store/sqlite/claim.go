package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// modeCase builds, once per store, the SQL expression giving the ordering
// mode of a message's destination (m.destination) from the configuration:
// a CASE over the destinations that have a policy, else the default mode.
func modeCase(cfg store.Config) string {
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	def := lit(string(cfg.DefaultPolicy.Ordering))
	if len(cfg.Policies) == 0 {
		return def
	}
	names := make([]string, 0, len(cfg.Policies))
	for name := range cfg.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("(CASE m.destination")
	for _, name := range names {
		b.WriteString(" WHEN " + lit(name) + " THEN " + lit(string(cfg.Policies[name].Ordering)))
	}
	b.WriteString(" ELSE " + def + " END)")
	return b.String()
}

// claimMessages implements the claim rules of the store package doc. The
// candidates are the live rows (partial index outbox_claim) that are due and
// not leased, in seq order; a candidate is skipped when an earlier message
// of its (destination, stream) holds it back (index outbox_stream):
//
//   - an unexpired lease holds back, unless either message's ordering is
//     none;
//   - under strict (the earlier message's ordering), so does a message
//     waiting for a later try or dead-lettered, unless an operator released
//     the stream past it.
//
// Messages with an empty stream are unordered. The first :limit candidates
// are leased to the caller, in the same statement.
const claimMessages = `UPDATE {{prefix}}outbox
SET instance_id = :instance, lease_expiry = :expiry
WHERE seq IN (
	SELECT m.seq FROM {{prefix}}outbox AS m
	WHERE m.dead_lettered_at IS NULL AND (m.status & 4) = 0
	  AND (m.lease_expiry IS NULL OR m.lease_expiry <= :now)
	  AND (m.scheduled_for IS NULL OR m.scheduled_for <= :now)
	  AND (json_array_length(:only) = 0 OR m.destination IN (SELECT value FROM json_each(:only)))
	  AND m.destination NOT IN (SELECT value FROM json_each(:skip))
	  AND (m.stream = ''
	    OR coalesce(nullif(m.ordering, ''), {{mode}}) = 'none'
	    OR NOT EXISTS (
		SELECT 1 FROM {{prefix}}outbox AS e
		WHERE e.destination = m.destination AND e.stream = m.stream AND e.seq < m.seq
		  AND (e.status & 4) = 0
		  AND coalesce(nullif(e.ordering, ''), {{mode}}) <> 'none'
		  AND (e.lease_expiry > :now
		    OR (coalesce(nullif(e.ordering, ''), {{mode}}) = 'strict'
		      AND e.stream_released_at IS NULL
		      AND (e.dead_lettered_at IS NOT NULL OR e.scheduled_for > :now)))))
	ORDER BY m.seq
	LIMIT :limit)
RETURNING ` + messageColumns

// claim leases up to req.Limit messages to instance and returns them in seq
// order, and apart the leased rows it cannot decode (to be quarantined).
func (s *Store) claim(ctx context.Context, tx *sql.Tx, instance string, req store.ClaimRequest, now time.Time) ([]*outbox.Message, []badRow, error) {
	if req.Limit <= 0 {
		return nil, nil, nil
	}
	lease := req.Lease
	if lease == 0 {
		lease = s.cfg.LeaseDuration
	}
	only, err := jsonList(req.Destinations)
	if err != nil {
		return nil, nil, err
	}
	skip, err := jsonList(req.ExcludeDestinations)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, s.sql(claimMessages),
		sql.Named("instance", instance),
		sql.Named("expiry", now.Add(lease).UnixMilli()),
		sql.Named("now", now.UnixMilli()),
		sql.Named("only", only),
		sql.Named("skip", skip),
		sql.Named("limit", req.Limit))
	if err != nil {
		return nil, nil, err
	}
	ms, bad, err := scanClaimed(rows)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Seq < ms[j].Seq })
	return ms, bad, nil
}

// jsonList encodes names as a JSON array for json_each; nil is [].
func jsonList(names []string) (string, error) {
	if len(names) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(names)
	return string(b), err
}
