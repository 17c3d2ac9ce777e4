package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDemoHookDropsDuplicates: the demo's endpoint de-duplicates on
// webhook-id, as the webhook transport asks receivers to. A request that
// outlived the relay's timeout on a loaded machine was accepted and then
// sent again; the endpoint counted the repeat as an order violation and
// a second acceptance, and the demo failed ("lost or duplicated") though
// delivery is at least once.
func TestDemoHookDropsDuplicates(t *testing.T) {
	h := newDemoHook(nil, demoPlan{})
	send := func(id, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/hooks/orders", strings.NewReader(body))
		req.SetPathValue("dest", "orders")
		req.Header.Set("Backstop-Stream", "s1")
		req.Header.Set("webhook-id", id)
		rec := httptest.NewRecorder()
		h.serve(rec, req)
		return rec.Code
	}
	for _, c := range []struct{ id, body string }{
		{"m1", `{"step":1}`}, {"m1", `{"step":1}`}, {"m2", `{"step":2}`}, {"m1", `{"step":1}`},
	} {
		if code := send(c.id, c.body); code != http.StatusNoContent {
			t.Fatalf("%s answered %d, want 204", c.id, code)
		}
	}
	got := h.counts()
	if got.accepted != 2 || got.duplicates != 2 || got.violations != 0 {
		t.Fatalf("accepted %d, duplicates %d, violations %d; want 2, 2, 0", got.accepted, got.duplicates, got.violations)
	}
	// A step out of order under a new id is still a violation.
	if code := send("m4", `{"step":4}`); code != http.StatusNoContent {
		t.Fatalf("m4 answered %d", code)
	}
	if got := h.counts(); got.violations != 1 {
		t.Fatalf("violations %d after a step skipped, want 1", got.violations)
	}
}
