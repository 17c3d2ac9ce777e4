package admin_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestListsWithoutPayloads: GET /v1/dlq and GET /v1/messages with
// payload=false list the items without their payloads (payload_omitted),
// read from a store that skips the column. The dashboard lists 1,000 at a
// time and shows no payload in a list; with payloads, 300 dead letters of
// 1 MiB each made one page of 315 MB and 2.5 GB of allocations in the
// server that also runs the relay. Any other value of payload is a 400
// naming it, and payload=true (or none) still lists them.
func TestListsWithoutPayloads(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		ctx := context.Background()
		big := []byte(`{"blob":"` + strings.Repeat("x", 256<<10) + `"}`)
		const n = 8
		for i := 0; i < n; i++ {
			m := &outbox.Message{Destination: "billing", Stream: "s", Type: "order.created", Payload: big}
			if err := st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if _, err := a.op.MessageAction(ctx, m.ID.String(), "dead-letter", admin.ActionRequest{Notes: "test"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		get := func(path string) []byte {
			t.Helper()
			resp, body, _ := a.send(http.MethodGet, path, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
			}
			return body
		}
		for _, path := range []string{"/v1/dlq?payload=false", "/v1/messages?payload=false"} {
			body := get(path)
			if len(body) > 64<<10 {
				t.Errorf("GET %s: %d bytes, want no payloads", path, len(body))
			}
			if bytes.Contains(body, []byte(`"blob"`)) || !bytes.Contains(body, []byte(`"payload_omitted":true`)) {
				t.Errorf("GET %s carried a payload, or did not say it was omitted: %.300s", path, body)
			}
		}
		es, err := a.rd.DeadLetters(ctx, url.Values{"payload": {"false"}})
		if err != nil || len(es.Items) != n/2 {
			t.Fatalf("dead letters without payloads: %d, %v; want %d", len(es.Items), err, n/2)
		}
		ms, err := a.rd.Messages(ctx, url.Values{"payload": {"false"}})
		if err != nil || len(ms.Items) != n {
			t.Fatalf("messages without payloads: %d, %v; want %d", len(ms.Items), err, n)
		}
		with, err := a.rd.DeadLetters(ctx, url.Values{"payload": {"true"}})
		if err != nil || len(with.Items) != n/2 || !bytes.Contains(with.Items[0].Payload, []byte(`"blob"`)) || with.Items[0].PayloadOmitted {
			t.Fatalf("dead letters with payloads: %+v, %v", with.Items, err)
		}
		for _, route := range []string{"/v1/dlq", "/v1/messages"} {
			_, err := a.rd.Do(ctx, http.MethodGet, route, url.Values{"payload": {"no"}}, nil, nil)
			wantProblem(t, err, http.StatusBadRequest, "payload")
		}
	})
}
