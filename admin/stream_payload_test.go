package admin_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestStreamWithoutItsHeadsPayload: a stream's status carries its head
// message, and the head its payload: 1,398,639 bytes for a stream whose
// head holds 1 MiB, and the dashboard's streams page asks up to 100
// streams at once, showing no payload. ?payload=false (as on the
// listings) leaves it out; without it the head keeps its payload.
func TestStreamWithoutItsHeadsPayload(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		big := bytes.Repeat([]byte{0xfe}, outbox.DefaultMaxPayloadBytes)
		if err := st.Enqueue(a.ctx, &outbox.Message{Destination: "billing", Type: "t", Stream: "s1", Payload: big}); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/stream?destination=billing&stream=s1&payload=false", "/v1/streams/billing/s1?payload=false"} {
			resp, body, _ := a.send(http.MethodGet, path, "")
			var s admin.Stream
			if err := json.Unmarshal(body, &s); err != nil || resp.StatusCode != http.StatusOK || s.Head == nil {
				t.Fatalf("GET %s: %d %v %.300s", path, resp.StatusCode, err, body)
			}
			if len(body) > 4<<10 || !s.Head.PayloadOmitted || s.Head.PayloadBase64 != "" {
				t.Errorf("GET %s: %d bytes, head payload omitted %v", path, len(body), s.Head.PayloadOmitted)
			}
		}
		s, err := a.rd.Stream(a.ctx, "billing", "s1")
		if err != nil || s.Head == nil || s.Head.PayloadOmitted || len(s.Head.PayloadBase64) < len(big) {
			t.Errorf("without ?payload=false the head lost its payload: %v", err)
		}
		_, _, p := a.send(http.MethodGet, "/v1/stream?destination=billing&stream=s1&payload=no", "")
		if p.Status != http.StatusBadRequest {
			t.Errorf("payload=no: %+v, want 400", p)
		}
	})
}
