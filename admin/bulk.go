package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/backstophq/backstop/dlq"
)

// BulkRequest is the body of a bulk action on dead letters.
type BulkRequest struct {
	Filter
	DryRun bool   `json:"dry_run,omitempty"`
	Notes  string `json:"notes,omitempty"`
	// All says an empty filter means every entry. Without it a replay,
	// resolve or delete (not a dry run) whose filter is empty is refused:
	// a script whose $DESTINATION was unset sent {"destination":""}, and
	// acted on the whole queue.
	All bool `json:"all,omitempty"`
}

// BulkResult says what a bulk action did, or with dry_run would do: how
// many entries and the first few of them.
type BulkResult struct {
	Action  string  `json:"action"`
	DryRun  bool    `json:"dry_run"`
	Count   int     `json:"count"`
	Sample  []Entry `json:"sample"`
	AuditID int64   `json:"audit_id,omitempty"`
	// AsOf is when the action looked (the store's clock): it took the
	// entries dead-lettered before then. Confirming a dry run with this
	// as the filter's before acts on the entries the dry run counted, not
	// on those dead-lettered since (fewer when another operator acted on
	// some meanwhile).
	AsOf *time.Time `json:"as_of,omitempty"`
}

// sampleSize is how many entries a bulk result shows.
const sampleSize = 10

func (s *Server) bulk(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req BulkRequest
		if !decode(w, r, &req) {
			return
		}
		f, ok := req.Filter.filters(w)
		if !ok {
			return
		}
		if !req.DryRun && !req.All && req.Filter == (Filter{}) {
			badField(w, "all", "the filter is empty, so the "+action+" would take every entry: "+
				"give a filter (destination, reason...), or set \"all\": true to mean every entry")
			return
		}
		if action == "replay" && f.Status != "" && f.Status != dlq.StatusPending {
			// A replayed or resolved entry is never replayed again; taking
			// the filter's status as "pending" replayed entries the
			// operator's filter had left out.
			badField(w, "status", "replay applies to pending entries only: leave status out, or set it to pending")
			return
		}
		if action == "replay" && !s.delivers(w, f.Destination, "destination") {
			return
		}
		s.runBulk(w, r, action, req, f)
	}
}

// RecoverRequest replays everything dead-lettered for a destination since a
// time, in stream order.
type RecoverRequest struct {
	Destination string     `json:"destination"`
	Since       *time.Time `json:"since"`
	DryRun      bool       `json:"dry_run,omitempty"`
	Notes       string     `json:"notes,omitempty"`
}

func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	var req RecoverRequest
	if !decode(w, r, &req) {
		return
	}
	switch {
	case req.Destination == "":
		badField(w, "destination", "destination is required")
		return
	case req.Since == nil:
		// a pointer: 0001-01-01T00:00:00Z is a time like any other
		badField(w, "since", "since is required (an RFC 3339 time)")
		return
	}
	since := *req.Since
	br := BulkRequest{Filter: Filter{Destination: req.Destination, After: &since}, DryRun: req.DryRun, Notes: req.Notes}
	f, ok := br.Filter.filters(w)
	if !ok || !s.delivers(w, req.Destination, "destination") {
		return
	}
	s.runBulk(w, r, "recover", br, f)
}

// runBulk applies the action page by page: each page of at most BulkPage
// entries in its own transaction, so that memory and lock time stay
// bounded whatever the number of entries.
func (s *Server) runBulk(w http.ResponseWriter, r *http.Request, action string, req BulkRequest, f *dlq.Filters) {
	ctx := r.Context()
	res := BulkResult{Action: action, DryRun: req.DryRun, Sample: []Entry{}}
	// The action's bound in time (eligible's), said in the result.
	var now time.Time
	if err := s.call(ctx, func(ctx context.Context) (err error) { now, err = s.adm.Now(ctx); return err }); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.Before == nil || now.Before(*f.Before) {
		f.Before = &now
	}
	res.AsOf = f.Before
	keep := func(es []*dlq.Entry) {
		for _, e := range es {
			if len(res.Sample) < sampleSize {
				// without its payload: scan and changePages read none,
				// and ten of a megabyte each made a result of 14 MB
				res.Sample = append(res.Sample, toEntry(e).withoutPayload())
			}
		}
		res.Count += len(es)
	}
	var err error
	switch {
	case req.DryRun:
		err = s.scan(ctx, f, action, keep)
	case action == "replay" || action == "recover":
		err = s.replayPages(ctx, f, dlq.Action{Actor: actor(ctx), Notes: req.Notes}, keep)
	default:
		err = s.changePages(ctx, f, action, dlq.Action{Actor: actor(ctx), Notes: req.Notes}, keep)
	}
	if err != nil && res.Count == 0 {
		s.fail(w, r, err)
		return
	}
	if !req.DryRun {
		filter, _ := json.Marshal(req.Filter)
		res.AuditID = s.record(r, action, "", string(filter), res.Count, req.Notes)
	}
	if err != nil { // some pages were done: say how far it went
		s.cfg.Logger.Error("admin API: bulk action stopped", "action", action, "done", res.Count, "audit_id", res.AuditID, "err", err)
		recorded := "recorded in the audit log"
		if res.AuditID == 0 {
			recorded = "the audit record could not be written (see the server's log)"
		}
		status := http.StatusInternalServerError
		if timedOut(r, err) {
			// a page the store did not answer in time: the rest may go
			w.Header().Set("Retry-After", unavailableRetryAfter)
			status = http.StatusServiceUnavailable
		}
		problem(w, status, "bulk action stopped",
			fmt.Sprintf("it was applied to the first %d entries, %s; run it again for the rest", res.Count, recorded), "")
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// eligible narrows f to the entries an action applies to, a BulkPage at a
// time: those dead-lettered before it started, f.Before, which runBulk
// bounds by the store's clock (store.Admin.Now). Without that bound a
// replay went on with the entries its own replays failed into again, page
// after page, for as long as the destination kept refusing them, and a
// delete took entries that arrived while it ran.
func (s *Server) eligible(f *dlq.Filters, action string) *dlq.Filters {
	c := *f
	switch action {
	case "replay", "recover":
		c.Status = dlq.StatusPending
	case "resolve":
		if c.Status == "" {
			c.Status = dlq.StatusPending
		}
	}
	c.Limit = s.cfg.BulkPage
	return &c
}

// scan pages through the entries the action would touch. A replay's is
// the store's own dry run, which passes over what a replay does (entries
// replayed before, messages still being delivered: dlq.ErrInFlight).
func (s *Server) scan(ctx context.Context, f *dlq.Filters, action string, fn func([]*dlq.Entry)) error {
	page := s.eligible(f, action)
	page.OmitPayload = true // a dry run counts and samples: no payload
	q := s.st.DLQ()
	list := q.List
	if action == "replay" || action == "recover" {
		list = func(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
			return q.ReplayMatchingAs(ctx, f, true, dlq.Action{})
		}
	}
	for {
		var es []*dlq.Entry
		err := s.call(ctx, func(ctx context.Context) (err error) {
			es, err = list(ctx, page)
			return err
		})
		if err != nil {
			return err
		}
		fn(es)
		if len(es) < page.Limit {
			return nil
		}
		page.Cursor = dlq.NextCursor(es[len(es)-1])
	}
}

// call makes the store calls of one page of a bulk action, bounded by
// RequestTimeout (the routes of bulk actions are not bounded as a whole).
func (s *Server) call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return fn(ctx)
}

// replayPages replays the pending matching entries a page per transaction.
// Replayed entries leave the filter; the cursor (the last entry replayed,
// which stays in the queue) spares each page a walk over them.
func (s *Server) replayPages(ctx context.Context, f *dlq.Filters, a dlq.Action, fn func([]*dlq.Entry)) error {
	page := s.eligible(f, "replay")
	for {
		var es []*dlq.Entry
		err := s.call(ctx, func(ctx context.Context) (err error) {
			es, err = s.st.DLQ().ReplayMatchingAs(ctx, page, false, a)
			return err
		})
		if err != nil {
			return err
		}
		fn(es)
		if len(es) < page.Limit {
			return nil
		}
		page.Cursor = dlq.NextCursor(es[len(es)-1])
	}
}

// changePages resolves or deletes the matching entries a page at a time,
// each page in one statement. Only the entries still in the status they
// were listed with are changed (and reported): one another operator
// replayed, resolved or deleted meanwhile is left as that operator left it.
func (s *Server) changePages(ctx context.Context, f *dlq.Filters, action string, a dlq.Action, fn func([]*dlq.Entry)) error {
	page := s.eligible(f, action)
	// Resolving and deleting need no payload: a page of 500 entries of
	// 1 MiB each was 500 MB read and held at once.
	page.OmitPayload = true
	q := s.st.DLQ()
	for {
		var es []*dlq.Entry
		var done []string
		err := s.call(ctx, func(ctx context.Context) (err error) {
			if es, err = q.List(ctx, page); err != nil {
				return err
			}
			ids := make([]string, len(es))
			for i, e := range es {
				ids[i] = e.ID
			}
			switch action {
			case "resolve":
				done, err = q.ResolveEntriesAs(ctx, ids, page.Status, a)
			case "delete":
				if page.Status != "" {
					done, err = q.DeleteEntries(ctx, ids, page.Status)
					break
				}
				// No status in the filter: each entry only while it is
				// still in the status it was listed with. Deleting them
				// in any status took an entry another operator resolved
				// or replayed meanwhile.
				done = []string{}
				// (A status no entry should have, written by hand, is
				// matched as before: any.)
				for _, st := range []dlq.Status{dlq.StatusPending, dlq.StatusReplayed, dlq.StatusResolved, ""} {
					var some []string
					for _, e := range es {
						if e.Status == st || st == "" && !e.Status.Valid() {
							some = append(some, e.ID)
						}
					}
					if len(some) == 0 {
						continue
					}
					var got []string
					if got, err = q.DeleteEntries(ctx, some, st); err != nil {
						return err
					}
					done = append(done, got...)
				}
			}
			return err
		})
		if err != nil {
			return err
		}
		fn(changed(es, done))
		if len(es) < page.Limit {
			return nil
		}
		// Past the page: entries left as they were (changed by someone
		// else, or resolved and still in the filter) are not listed again.
		page.Cursor = dlq.NextCursor(es[len(es)-1])
	}
}

// changed is the entries of es whose ids are in done, in es's order.
func changed(es []*dlq.Entry, done []string) []*dlq.Entry {
	in := make(map[string]bool, len(done))
	for _, id := range done {
		in[id] = true
	}
	out := es[:0:0]
	for _, e := range es {
		if in[e.ID] {
			out = append(out, e)
		}
	}
	return out
}

// PurgeRequest removes entries dead-lettered before a time.
type PurgeRequest struct {
	OlderThan string `json:"older_than"` // a Go duration such as 720h
	DryRun    bool   `json:"dry_run,omitempty"`
	Notes     string `json:"notes,omitempty"`
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	var req PurgeRequest
	if !decode(w, r, &req) {
		return
	}
	d, err := time.ParseDuration(req.OlderThan)
	if err != nil || d <= 0 {
		badField(w, "older_than", "older_than must be a positive Go duration such as 720h")
		return
	}
	before := time.Now().Add(-d)
	if req.DryRun {
		br := BulkRequest{Filter: Filter{Before: &before}, DryRun: true}
		f, _ := br.Filter.filters(w)
		s.runBulk(w, r, "purge", br, f)
		return
	}
	// One statement, however many entries: not bounded by RequestTimeout
	// (a purge that took longer would be rolled back every time).
	n, err := s.st.DLQ().PurgeBefore(r.Context(), before)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	filter, _ := json.Marshal(map[string]any{"older_than": req.OlderThan, "before": before.UTC()})
	id := s.record(r, "purge", "", string(filter), n, req.Notes)
	writeJSON(w, http.StatusOK, BulkResult{Action: "purge", Count: n, Sample: []Entry{}, AuditID: id})
}

func isNotFound(err error) bool { return errors.Is(err, dlq.ErrNotFound) }
