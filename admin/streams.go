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

func (s *Server) getStream(w http.ResponseWriter, r *http.Request) {
	dest, stream := r.PathValue("destination"), r.PathValue("stream")
	if !textFields(w, [2]string{"destination", dest}, [2]string{"stream", stream}) {
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
		out.Head = &m
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) releaseStream(w http.ResponseWriter, r *http.Request) {
	var req ActionRequest
	if !optionalBody(w, r, &req) {
		return
	}
	dest, stream := r.PathValue("destination"), r.PathValue("stream")
	if !textFields(w, [2]string{"destination", dest}, [2]string{"stream", stream}) {
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
