package admin_test

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestPayloadAtTheLimitGoesThroughTheAPI: a binary payload at the outbox's
// limit (1 MiB) goes in base64, a third larger, with the default body
// limit. That limit was 1 MiB too, so such a payload, one the Go API takes,
// got 413 from POST /v1/messages (and `backstop enqueue --payload-file`).
func TestPayloadAtTheLimitGoesThroughTheAPI(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		payload := bytes.Repeat([]byte{0xff, 0x00, 0x7f}, outbox.DefaultMaxPayloadBytes/3+1)[:outbox.DefaultMaxPayloadBytes]
		res, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "blob",
			PayloadBase64: base64.StdEncoding.EncodeToString(payload), Headers: map[string]string{"X-Trace": "abc"}})
		if err != nil {
			t.Fatalf("enqueue of a %d-byte payload: %v", len(payload), err)
		}
		m, err := a.op.Message(a.ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := base64.StdEncoding.DecodeString(m.PayloadBase64); !bytes.Equal(got, payload) {
			t.Fatalf("payload came back as %d bytes, want the %d sent", len(got), len(payload))
		}
	})
}
