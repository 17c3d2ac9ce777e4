package admin_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestStatsLeaveThePayloadsInTheStore: GET /v1/stats lists up to 100
// poison candidates (messages still retrying after 3 attempts or more)
// and sent each with its payload, which no reader of the stats shows (the
// dashboard's overview counts them, polling every 2 s; backstop stats
// prints the count). Four retrying messages of 1 MiB made the answer 5.6
// MB, so 100 made it about 140 MB per poll, more than the 64 MiB the CLI
// reads, and the store read them all every 5 s. The candidates are now
// read and sent without payloads (payload_omitted).
func TestStatsLeaveThePayloadsInTheStore(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		big := bytes.Repeat([]byte{0xfe}, outbox.DefaultMaxPayloadBytes)
		for range 4 {
			if err := st.Enqueue(a.ctx, &outbox.Message{Destination: "billing", Type: "t", Payload: big}); err != nil {
				t.Fatal(err)
			}
		}
		rawExec(t, st, `UPDATE backstop_outbox SET attempts = 3, status = status | 32768, failure_reason = 1, error = 'down'`)
		resp, body, _ := a.send(http.MethodGet, "/v1/stats", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/stats: %d %s", resp.StatusCode, body)
		}
		if len(body) > 64<<10 {
			t.Errorf("GET /v1/stats answered %d bytes for 4 poison candidates", len(body))
		}
		s, err := a.rd.Stats(a.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.PoisonCandidates) != 4 {
			t.Fatalf("%d poison candidates, want 4", len(s.PoisonCandidates))
		}
		for _, m := range s.PoisonCandidates {
			if len(m.Payload) != 0 || m.PayloadBase64 != "" || !m.PayloadOmitted || m.Attempts != 3 || m.Error != "down" {
				t.Errorf("poison candidate %s: payload %d+%d bytes, omitted %v, attempts %d, error %q", m.ID, len(m.Payload), len(m.PayloadBase64), m.PayloadOmitted, m.Attempts, m.Error)
			}
		}
	})
}
