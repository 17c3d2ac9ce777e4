package postgres

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The claim runs in the database, in the function <prefix>claim of
// migration 0003 (docs/claim.md): it walks the heads of ready streams,
// round-robin, and the unordered messages by their own index, so that rows
// held back behind a leased, waiting or dead-lettered head are never read.
// The function sets jit = off for itself.
//
// Parameters: $1 now (NULL: database clock), $2 instance, $3 limit, $4
// lease in microseconds, $5 destinations (empty: all), $6 excluded
// destinations, $7/$8 destinations with a policy and their ordering
// modes, $9 the default policy's ordering mode, $10/$11 destinations with
// a cap (ClaimRequest.PerDestination) and their caps, $12 the byte budget
// (ClaimRequest.MaxBytes; NULL: none) and $13 FirstAnySize (migrations
// 0039 and 0040).
//
// A payload or headers larger than any message may carry (plain SQL does
// not check them) are not read: their sizes, the last two columns, say
// so, and the row is quarantined (store.CheckClaimedSize).
var claimSQL = `SELECT ` + claimCols + `, octet_length(o.payload), pg_column_size(o.headers)
FROM {fn}claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) o`

// claimCols are msgColsOf("o") with the payload and headers left out
// (NULL) when too large to read.
var claimCols = strings.NewReplacer(
	"o.payload,", fmt.Sprintf("CASE WHEN octet_length(o.payload) <= %d THEN o.payload END,", outbox.MaxLimits.MaxPayloadBytes),
	"o.headers,", fmt.Sprintf("CASE WHEN pg_column_size(o.headers) <= %d THEN o.headers END,", store.MaxStoredHeaderBytes),
).Replace(msgColsOf("o"))

// claimArgs are the arguments of claimSQL after now, instance, limit and
// lease.
func (s *Store) claimArgs(req store.ClaimRequest) []any {
	capDests, caps := perDestination(req.PerDestination)
	var budget *int64
	if req.MaxBytes > 0 {
		budget = &req.MaxBytes
	}
	return []any{nonNil(req.Destinations), nonNil(req.ExcludeDestinations), s.policyDests, s.policyModes,
		string(s.cfg.DefaultPolicy.Ordering), capDests, caps, budget, req.FirstAnySize}
}

// perDestination spells the caps as two arrays, in name order; a negative
// cap counts as zero.
func perDestination(caps map[string]int) ([]string, []int32) {
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]int32, len(names))
	for i, name := range names {
		out[i] = int32(max(0, min(caps[name], 1<<30)))
	}
	return names, out
}

// renewReader reads the ids and new expiries renewSQL returns into
// res.Renewed, those it passed over (locked elsewhere) into res.Deferred,
// and adds the other ids of ids to res.Stale.
func renewReader(ids []uuid.UUID, res *store.Result) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		renewed := map[uuid.UUID]bool{}
		for rows.Next() {
			var id uuid.UUID
			var expiry pgtype.Timestamptz
			if err := rows.Scan(&id, &expiry); err != nil {
				return err
			}
			renewed[id] = true
			if !expiry.Valid {
				res.Deferred = append(res.Deferred, id)
				continue
			}
			res.Renewed = append(res.Renewed, store.Lease{ID: id, Expiry: expiry.Time})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if !renewed[id] {
				res.Stale = append(res.Stale, id)
			}
		}
		return nil
	}
}
