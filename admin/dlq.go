package admin

import (
	"encoding/json"
	"fmt"
	"github.com/google/uuid"
	"net/http"
	"strconv"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// Entry is a dead letter as the API shows it.
type Entry struct {
	ID            string          `json:"id"`
	MessageID     string          `json:"message_id"`
	Destination   string          `json:"destination"`
	Stream        string          `json:"stream"`
	Type          string          `json:"type"`
	Seq           int64           `json:"seq"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	// PayloadOmitted is set on a listing asked for without payloads
	// (?payload=false).
	PayloadOmitted   bool              `json:"payload_omitted,omitempty"`
	Headers          map[string]string `json:"headers"`
	TaskID           string            `json:"task_id,omitempty"`
	DAGID            string            `json:"dag_id,omitempty"`
	DAGRunID         string            `json:"dag_run_id,omitempty"`
	Reason           string            `json:"reason"`
	Error            string            `json:"error"`
	Fingerprint      string            `json:"fingerprint"`
	Attempts         int               `json:"attempts"`
	FailureTime      time.Time         `json:"failure_time"`
	FirstFailureTime *time.Time        `json:"first_failure_time"`
	LastAttemptTime  *time.Time        `json:"last_attempt_time"`
	Metadata         map[string]any    `json:"metadata"`
	Status           string            `json:"status"`
	ResolutionNotes  string            `json:"resolution_notes"`
	ResolvedBy       string            `json:"resolved_by"`
	ResolvedAt       *time.Time        `json:"resolved_at"`
	ReplayedBy       string            `json:"replayed_by"`
	ReplayNotes      string            `json:"replay_notes"`
	ReplayedAt       *time.Time        `json:"replayed_at"`
	// History is the entry's audit trail, newest first (GET /v1/dlq/{id}).
	History []AuditRecord `json:"history,omitempty"`
}

// withoutPayload is e shown without its payload (PayloadOmitted), as a
// listing asked for without payloads shows it.
func (e Entry) withoutPayload() Entry {
	e.Payload, e.PayloadBase64, e.PayloadOmitted = nil, "", true
	return e
}

func toEntry(e *dlq.Entry) Entry {
	out := Entry{ID: e.ID, MessageID: e.MessageID, Destination: e.Destination, Stream: e.Stream, Type: e.Type,
		Seq: e.Seq, Headers: e.Headers, TaskID: e.TaskID, DAGID: e.DAGID, DAGRunID: e.DAGRunID,
		Reason: e.FailureReason, Error: e.ErrorMessage, Fingerprint: e.Fingerprint, Attempts: e.Attempts,
		FailureTime: e.FailureTime, FirstFailureTime: timePtr(e.FirstFailureTime), LastAttemptTime: timePtr(e.LastAttemptTime),
		Metadata: e.Metadata, Status: string(e.Status), ResolutionNotes: e.ResolutionNotes, ResolvedBy: e.ResolvedBy,
		ResolvedAt: e.ResolvedAt, ReplayedBy: e.ReplayedBy, ReplayNotes: e.ReplayNotes, ReplayedAt: e.ReplayedAt}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if out.Metadata == nil {
		out.Metadata = map[string]any{}
	}
	out.Payload, out.PayloadBase64 = payloadFields(e.Payload)
	return out
}

// Filter selects dead letters, in query parameters (lists) or in the body
// of a bulk action. Times are RFC 3339.
type Filter struct {
	Destination string     `json:"destination,omitempty"`
	Stream      string     `json:"stream,omitempty"`
	MessageID   string     `json:"message_id,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	Status      string     `json:"status,omitempty"`
	After       *time.Time `json:"after,omitempty"`
	Before      *time.Time `json:"before,omitempty"`
}

// filters turns f into the queue's filters, or answers 400 naming the
// field.
func (f Filter) filters(w http.ResponseWriter) (*dlq.Filters, bool) {
	if !textFields(w, [2]string{"destination", f.Destination}, [2]string{"stream", f.Stream},
		[2]string{"message_id", f.MessageID}, [2]string{"fingerprint", f.Fingerprint}) {
		return nil, false
	}
	out := &dlq.Filters{Destination: f.Destination, Stream: f.Stream, MessageID: f.MessageID, Fingerprint: f.Fingerprint,
		Status: dlq.Status(f.Status), After: f.After, Before: f.Before}
	if f.Reason != "" {
		r, err := errorhandling.ParseFailureReason(f.Reason)
		if err != nil {
			badField(w, "reason", "unknown failure reason "+strconv.Quote(f.Reason))
			return nil, false
		}
		out.Reason = &r
	}
	if f.Status != "" && !out.Status.Valid() {
		badField(w, "status", "status must be pending, replayed or resolved")
		return nil, false
	}
	return out, true
}

func (s *Server) listDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !knownParams(w, q, "destination", "stream", "message_id", "reason", "fingerprint", "status", "after", "before",
		"limit", "cursor", "payload") {
		return
	}
	f := Filter{Destination: q.Get("destination"), Stream: q.Get("stream"), MessageID: q.Get("message_id"), Reason: q.Get("reason"),
		Fingerprint: q.Get("fingerprint"), Status: q.Get("status")}
	for _, p := range []struct {
		name string
		t    **time.Time
	}{{"after", &f.After}, {"before", &f.Before}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				badField(w, p.name, p.name+" must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
				return
			}
			*p.t = &t
		}
	}
	df, ok := f.filters(w)
	if !ok {
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	omit, ok := omitPayload(w, q.Get("payload"))
	if !ok {
		return
	}
	df.Limit, df.Cursor, df.OmitPayload = limit, q.Get("cursor"), omit
	if !textFields(w, [2]string{"cursor", df.Cursor}) {
		return
	}
	entries, err := s.st.DLQ().List(r.Context(), df)
	if err != nil {
		if df.Cursor != "" && isNotFound(err) {
			badField(w, "cursor", "cursor must be a next_cursor returned by this API")
			return
		}
		s.fail(w, r, err)
		return
	}
	out := List[Entry]{Items: make([]Entry, len(entries))}
	for i, e := range entries {
		out.Items[i] = toEntry(e)
		out.Items[i].PayloadOmitted = omit
	}
	if len(entries) == limit {
		out.NextCursor = dlq.NextCursor(entries[len(entries)-1])
	}
	writeJSON(w, http.StatusOK, out)
}

// entryID is the entry id a path names: a UUID in any of the forms
// uuid.Parse takes (upper case, no dashes, urn:uuid:) in the canonical
// form the stores keep, as message ids are read; anything else as given.
// An upper-case entry id was not found though the same message id was.
func entryID(r *http.Request) string {
	raw := r.PathValue("id")
	if id, err := uuid.Parse(raw); err == nil {
		return id.String()
	}
	return raw
}

func (s *Server) getEntry(w http.ResponseWriter, r *http.Request) {
	if !textFields(w, [2]string{"id", r.PathValue("id")}) {
		return
	}
	e, err := s.st.DLQ().Get(r.Context(), entryID(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toEntry(e)
	recs, err := s.adm.AuditLog(r.Context(), store.AuditFilter{Target: e.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out.History = toAudit(recs)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) entryAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req ActionRequest
		if !optionalBody(w, r, &req) {
			return
		}
		if !textFields(w, [2]string{"id", r.PathValue("id")}) {
			return
		}
		id := entryID(r)
		q, a := s.st.DLQ(), dlq.Action{Actor: actor(r.Context()), Notes: req.Notes}
		var err error
		switch action {
		case "replay":
			var e *dlq.Entry
			if e, err = q.Get(r.Context(), id); err == nil {
				if !s.delivers(w, e.Destination, "destination") {
					return
				}
				err = q.ReplayAs(r.Context(), id, a)
			}
		case "resolve":
			err = q.ResolveAs(r.Context(), id, a)
		case "delete":
			if _, err = q.Get(r.Context(), id); err == nil {
				err = q.Delete(r.Context(), id)
			}
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		rec := s.record(r, action, id, "", 1, req.Notes)
		writeJSON(w, http.StatusOK, ActionResult{Action: action, Target: id, Count: 1, AuditID: rec})
	}
}

// delivers says whether this server delivers the destination a replay
// would send messages to, and answers 422 naming field if it does not: a
// replayed message for a destination no relay of the server delivers waits
// in the outbox, unseen, while the entry says it was replayed. An empty
// destination (a workflow task's entry, or a bulk filter that names none)
// and a server that was given no destinations pass.
func (s *Server) delivers(w http.ResponseWriter, dest, field string) bool {
	if s.known == nil || dest == "" || s.known[dest] {
		return true
	}
	problem(w, http.StatusUnprocessableEntity, "unknown destination",
		fmt.Sprintf("destination %q is not configured on this server: a replayed message would wait in the outbox until a relay that delivers it runs; add the destination, or resolve or delete the entry", dest), field)
	return false
}
