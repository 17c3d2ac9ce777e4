package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A traceparent on the enqueue request is stored with the message as its
// traceparent header (which every transport sends); a malformed one is
// dropped rather than sent on.
func TestEnqueueTraceParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		post := func(traceparent string) string {
			t.Helper()
			body := `{"destination":"billing","type":"order.created","payload":{"n":1}}`
			req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.op.BaseURL+"/v1/messages", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+a.op.Token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Traceparent", traceparent)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out admin.EnqueueResponse
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusAccepted {
				t.Fatalf("enqueue: status %d, %+v, %v", resp.StatusCode, out, err)
			}
			return out.ID
		}
		m, err := a.op.Message(a.ctx, post(tp))
		if err != nil || m.Headers[outbox.TraceParentHeader] != tp {
			t.Fatalf("message headers %v (%v), want traceparent %q", m.Headers, err, tp)
		}
		m, err = a.op.Message(a.ctx, post("00-not-a-trace-parent"))
		if err != nil || m.Headers[outbox.TraceParentHeader] != "" {
			t.Fatalf("a malformed traceparent was stored: %v (%v)", m.Headers, err)
		}
	})
}

// A message with as many headers as it may hold, posted with a
// traceparent, is written (without the traceparent): it was a 500, the
// store refusing the 65th header the server had added itself.
func TestEnqueueFullHeadersWithATraceParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		headers := map[string]string{}
		for i := range outbox.DefaultMaxHeaders {
			headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
		body, err := json.Marshal(admin.EnqueueRequest{Destination: "billing", Type: "order.created", Headers: headers})
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.op.BaseURL+"/v1/messages", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.op.Token)
		req.Header.Set("Traceparent", tp)
		resp, err := a.op.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("enqueue: status %d: %s", resp.StatusCode, b)
		}
	})
}
