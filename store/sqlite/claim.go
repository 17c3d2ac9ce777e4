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

// claim leases up to req.Limit messages to instance under the claim rules
// of package store (pickHeads chooses them, reading stream heads only) and
// returns them in seq order, and apart the leased rows it cannot decode (to
// be quarantined).
func (s *Store) claim(ctx context.Context, tx *sql.Tx, instance string, req store.ClaimRequest, now time.Time) ([]*outbox.Message, []badRow, error) {
	if req.Limit <= 0 {
		return nil, nil, nil
	}
	lease := req.Lease
	if lease == 0 {
		lease = s.cfg.LeaseDuration
	}
	expiry := now.Add(lease).UnixMilli()
	seqs, err := s.pickHeads(ctx, tx, req, now.UnixMilli(), expiry)
	if err != nil || len(seqs) == 0 {
		return nil, nil, err
	}
	rows, err := s.queryCached(ctx, tx, leaseSeqs,
		sql.Named("instance", instance), sql.Named("expiry", expiry), sql.Named("seqs", seqList(seqs)))
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
