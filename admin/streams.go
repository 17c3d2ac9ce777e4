package admin

import (
	"net/http"
)

// Stream is a stream's state: its head and why it is blocked, in words.
type Stream struct {
	Destination string   `json:"destination"`
	Stream      string   `json:"stream"`
	Pending     int      `json:"pending"`
	Blocked     bool     `json:"blocked"`
	Why         string   `json:"why"`
	Head        *Message `json:"head"`
}

// streamNamed reads the stream a request names: from the path on
// /v1/streams/{destination}/{stream}, from the query (destination=,
// stream=) on /v1/stream. The query form exists for streams named "." or
// "..": a browser's URL parser drops such a path segment, even written
// %2E, so the dashboard names every stream in the query. A request
// without one of the two, or with a name that is not UTF-8 without NUL,
// gets a 400 naming it.
func streamNamed(w http.ResponseWriter, r *http.Request) (dest, stream string, ok bool) {
	if r.PathValue("stream") != "" {
		dest, stream = r.PathValue("destination"), r.PathValue("stream")
	} else {
		q := r.URL.Query()
		dest, stream = q.Get("destination"), q.Get("stream")
		for _, f := range [...]string{"destination", "stream"} {
			if q.Get(f) == "" {
				badField(w, f, "the query must name the "+f)
				return "", "", false
			}
		}
	}
	if !textFields(w, [2]string{"destination", dest}, [2]string{"stream", stream}) {
		return "", "", false
	}
	return dest, stream, true
}

func (s *Server) getStream(w http.ResponseWriter, r *http.Request) {
	dest, stream, ok := streamNamed(w, r)
	if !ok {
		return
	}
	// ?payload=false leaves out the head's payload, as listings do: the
	// dashboard's streams page asks up to 100 streams at once and shows no
	// payload.
	omit, ok := omitPayload(w, r.URL.Query().Get("payload"))
	if !ok {
		return
	}
	st, err := s.st.StreamStatus(r.Context(), dest, stream)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := Stream{Destination: st.Destination, Stream: st.Stream, Pending: st.Pending, Blocked: st.Blocked, Why: st.Why}
	if st.Head != nil {
		m := toMessage(st.Head)
		if omit {
			m = m.withoutPayload()
		}
		out.Head = &m
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) releaseStream(w http.ResponseWriter, r *http.Request) {
	var req ActionRequest
	if !optionalBody(w, r, &req) {
		return
	}
	dest, stream, ok := streamNamed(w, r)
	if !ok {
		return
	}
	n, err := s.st.ReleaseStream(r.Context(), dest, stream)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	target := dest + "/" + stream
	id := s.record(r, "release", target, "", n, req.Notes)
	writeJSON(w, http.StatusOK, ActionResult{Action: "release", Target: target, Count: n, AuditID: id})
}
