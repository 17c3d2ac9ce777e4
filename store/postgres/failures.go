package postgres

import (
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// lockedRow is what lockFailuresSQL reads of a failed message.
type lockedRow struct {
	id          uuid.UUID
	destination string
	attempts    int
	instance    string
	parked      bool // dead-lettered by hand while leased
}

// failureArrays are the parameters of failSQL and deadLetterSQL.
type failureArrays struct {
	ids          []pgtype.UUID
	flags        []int32
	attempts     []int32
	reasons      []int32
	errors       []string
	fingerprints []string
	delays       []int64
	deadLetter   []bool

	dlEntries, dlIDs, dlNames, dlMeta, dlErrors []string
	dlReasons                                   []int32

	// unpark are the caller's rows an operator dead-lettered while it
	// delivered them: stale, and their leases dropped (unparkSQL).
	unpark []pgtype.UUID
}

func failureIDs(fs []store.Failure) []uuid.UUID {
	ids := make([]uuid.UUID, len(fs))
	for i, f := range fs {
		ids[i] = f.ID
	}
	return ids
}

// decideFailures applies store.Config.DecideFailure to each failure of a
// row the caller still leases, and reports the others as stale. The first
// failure of an id counts; later duplicates are ignored.
func (s *Store) decideFailures(b *store.Batch, locked []lockedRow, res *store.Result) *failureArrays {
	rows := make(map[uuid.UUID]lockedRow, len(locked))
	for _, r := range locked {
		rows[r.id] = r
	}
	fa := &failureArrays{}
	seen := map[uuid.UUID]bool{}
	for _, f := range b.Failures {
		if seen[f.ID] {
			continue
		}
		seen[f.ID] = true
		r, ok := rows[f.ID]
		if !ok || r.instance != b.Instance.ID || r.parked {
			if ok && r.parked && r.instance == b.Instance.ID {
				fa.unpark = append(fa.unpark, pgUUID(f.ID))
			}
			res.Stale = append(res.Stale, f.ID)
			continue
		}
		out := s.cfg.DecideFailure(r.destination, r.attempts, f)
		fa.ids = append(fa.ids, pgUUID(f.ID))
		fa.flags = append(fa.flags, int32(f.CompletedStatus))
		fa.attempts = append(fa.attempts, int32(out.Attempts))
		fa.reasons = append(fa.reasons, int32(out.Reason))
		fa.errors = append(fa.errors, outbox.TruncateError(f.Error))
		fa.fingerprints = append(fa.fingerprints, outbox.CleanText(f.Fingerprint, outbox.MaxErrorLength))
		fa.delays = append(fa.delays, micros(out.Delay))
		fa.deadLetter = append(fa.deadLetter, out.DeadLetter)
		if !out.DeadLetter {
			continue
		}
		res.DeadLettered = append(res.DeadLettered, f.ID)
		fa.dlEntries = append(fa.dlEntries, newEntryID())
		fa.dlIDs = append(fa.dlIDs, f.ID.String())
		fa.dlNames = append(fa.dlNames, out.DeadLetterReason.String())
		fa.dlReasons = append(fa.dlReasons, int32(out.DeadLetterReason))
		fa.dlMeta = append(fa.dlMeta, failureMetadata(b.Instance.ID, f, out))
		fa.dlErrors = append(fa.dlErrors, outbox.TruncateError(f.Error))
	}
	return fa
}

// failureMetadata is the dead-letter entry's metadata for a failure.
func failureMetadata(instance string, f store.Failure, out store.FailureOutcome) string {
	m := map[string]any{"instance_id": instance, "last_failure_reason": out.Reason.String(), "permanent": f.Permanent}
	b, _ := json.Marshal(m)
	return string(b)
}

// newEntryID returns a dead-letter entry id: a UUIDv7, so that ids sort by
// creation.
func newEntryID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
