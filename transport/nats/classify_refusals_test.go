package natstransport

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
)

// TestPublishRefusalsThatAreNotTheMessagesFault: two 4xx answers of
// nats-server 2.11+ to a publish say nothing about the message. 429
// (10167, JSStreamTooManyRequests) is the stream's ingest buffer being
// full (max_buffered_msgs / max_buffered_size, shared by every publisher
// of the stream); 409 (10158, JSStreamDuplicateMessageConflict) answers
// a re-send whose first publish (same Nats-Msg-Id) a clustered stream is
// still proposing, after the first Deliver timed out: the message is
// landing. Both fell into "any other 4xx is the message's" and were
// dead-lettered at once.
func TestPublishRefusalsThatAreNotTheMessagesFault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		status int
		code   int
		desc   string
	}{
		{"stream ingest buffer full", 429, 10167, "too many requests"},
		{"same msg id still in process (clustered re-send)", 409, 10158, "duplicate message id is in process"},
	} {
		err := classify(context.Background(), fmt.Errorf("natstransport: publish: nats: %w",
			&jetstream.APIError{Code: c.status, ErrorCode: jetstream.ErrorCode(c.code), Description: c.desc}))
		v := errorhandling.NewErrorClassifier().Classify(err)
		if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination {
			t.Errorf("%s (%d, %d): classified %v/%v/%q, want transient, destination (not dead-lettered, no attempt burnt)",
				c.name, c.status, c.code, v.Class, v.Blame, v.Code)
		}
	}
}
