package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// BlockedStreams answers in time with tens of thousands of dead letters in
// one stream: its query looked, for each blocking message, through every
// later message of its stream, so 100,000 dead letters in 50 streams took
// minutes, and backstop stats (and GET /v1/stats) ran into the request
// timeout on every call.
func TestBlockedStreamsWithManyDeadLettersInAStream(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
	loadPage(t, s, "a", 20000, time.Now().Add(-time.Hour))
	// One live message after them: the stream is blocked.
	if _, err := s.w.Exec(s.sql(`INSERT INTO {{prefix}}outbox (destination, stream, type, payload) VALUES ('d', 's', 'e', '{}')`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := s.BlockedStreams(ctx)
	if err != nil || n != 1 {
		t.Fatalf("BlockedStreams = %d, %v; want 1", n, err)
	}
}
