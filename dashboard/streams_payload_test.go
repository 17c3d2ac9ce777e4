package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/outbox"
)

// TestStreamsPageLeavesThePayloadsOnTheServer: the streams page asks the
// status of up to 100 streams at once and shows each head's id, type and
// attempts; each answer carried the head's payload too: three blocked
// streams whose heads held 1 MiB each cost the page 4.2 MB. It asks
// without payloads now.
func TestStreamsPageLeavesThePayloadsOnTheServer(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte{0xfe}, outbox.DefaultMaxPayloadBytes)
	for i := range 3 {
		stream := fmt.Sprintf("big-%d", i)
		head := &outbox.Message{Destination: "orders", Type: "t", Stream: stream, Payload: big}
		behind := &outbox.Message{Destination: "orders", Type: "t", Stream: stream, Payload: []byte(`{}`)}
		for _, m := range []*outbox.Message{head, behind} {
			if err := s.st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.st.DeadLetter(ctx, head.ID, "too big"); err != nil {
			t.Fatal(err)
		}
	}
	tb := s.signedIn(t, b)
	tb.page("streams")
	tb.until("three blocked streams", `document.querySelectorAll('article.stream-card').length === 3`)
	got := eval[int](tb, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/stream?')).reduce((n, e) => n + e.encodedBodySize, 0)`)
	asked := eval[int](tb, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/stream?')).length`)
	if asked < 3 || got > 64<<10 {
		t.Errorf("the streams page asked %d stream statuses, %d bytes in all", asked, got)
	}
}
