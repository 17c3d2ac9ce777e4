package dlq

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"
)

// matches reports whether e satisfies every set field of f. Limit and
// Cursor are paging, not matching, and are ignored here. A nil f matches
// everything.
func matches(f *Filters, e *Entry) bool {
	if f == nil {
		return true
	}
	switch {
	case f.DAGID != "" && e.DAGID != f.DAGID,
		f.TaskID != "" && e.TaskID != f.TaskID,
		f.Destination != "" && e.Destination != f.Destination,
		f.Stream != "" && e.Stream != f.Stream,
		f.MessageID != "" && e.MessageID != f.MessageID,
		f.Reason != nil && e.Reason != *f.Reason,
		f.Fingerprint != "" && e.Fingerprint != f.Fingerprint,
		f.Status != "" && e.Status != f.Status,
		f.After != nil && e.FailureTime.Before(*f.After),
		f.Before != nil && !e.FailureTime.Before(*f.Before),
		f.Replayed != nil && e.Replayed != *f.Replayed:
		return false
	}
	return true
}

// compareEntries orders entries by FailureTime then ID, the listing order
// of every queue.
func compareEntries(a, b *Entry) int {
	if c := a.FailureTime.Compare(b.FailureTime); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// page returns the entries of sorted (already in listing order) that come
// after the cursor entry, match f and, when f.Limit > 0, at most f.Limit of
// them. cursor is the entry named by f.Cursor, nil for the first page.
func page(sorted []*Entry, f *Filters, cursor *Entry, keep func(*Entry) bool) []*Entry {
	out := []*Entry{}
	for _, e := range sorted {
		if cursor != nil && compareEntries(e, cursor) <= 0 {
			continue
		}
		if !matches(f, e) || keep != nil && !keep(e) {
			continue
		}
		out = append(out, e)
		if f != nil && f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out
}

// sortedEntries returns the values of m in listing order.
func sortedEntries(m map[string]*Entry) []*Entry {
	return slices.SortedFunc(maps.Values(m), compareEntries)
}

// clone returns a deep copy of e, so that neither the caller nor the queue
// can change the other's entry. Metadata values are copied as values: a
// pointer or slice stored in Metadata is shared.
func clone(e *Entry) *Entry {
	c := *e
	c.Payload = slices.Clone(e.Payload)
	c.Headers = maps.Clone(e.Headers)
	c.Metadata = maps.Clone(e.Metadata)
	c.ResolvedAt = cloneTime(e.ResolvedAt)
	c.ReplayedAt = cloneTime(e.ReplayedAt)
	return &c
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// cloneAll returns deep copies of entries.
func cloneAll(entries []*Entry) []*Entry {
	out := make([]*Entry, len(entries))
	for i, e := range entries {
		out[i] = clone(e)
	}
	return out
}

// NextCursor is the Filters.Cursor that continues a listing after e: its
// failure time and ID. Unlike e's ID alone, it goes on working once e is
// gone (deleted, purged, or replayed away by another operator between two
// pages).
//
// An entry whose failure time could not be read (left zero: a row changed
// with plain SQL, see store.ShowUndecodableEntry) is continued after by
// its ID alone, which the queue looks up: a cursor of the zero time would
// list that entry and every one after it again, page after page.
func NextCursor(e *Entry) string {
	if e.FailureTime.IsZero() {
		return e.ID
	}
	return e.FailureTime.UTC().Format(time.RFC3339Nano) + "/" + e.ID
}

// ParseCursor reads a cursor NextCursor made. ok is false for any other
// text, which a queue takes as an entry's ID.
func ParseCursor(c string) (at time.Time, id string, ok bool) {
	ts, id, found := strings.Cut(c, "/")
	if !found || id == "" {
		return time.Time{}, "", false
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", false
	}
	return at, id, true
}
