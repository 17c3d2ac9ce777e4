package natsinbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestConsumerWithoutExplicitAcksIsRefused runs the receiver on consumers
// that do not wait for each message's own acknowledgement. With AckNone a
// message counts as acknowledged once sent, so one the receiver held
// through a store outage, gave back at a stop or had in hand at a crash
// was never delivered again; with AckAll, acknowledging a later message
// acknowledges the earlier ones given back and not yet stored. Run must
// refuse such a consumer, naming AckPolicy.
func TestConsumerWithoutExplicitAcksIsRefused(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 30*time.Second)
	in := e.NewInbox(e.Config())
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "ack-none", AckPolicy: jetstream.AckNonePolicy},
		{Durable: "ack-all", AckPolicy: jetstream.AckAllPolicy, AckWait: 30 * time.Second},
	} {
		cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, c)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Second)
		err = r.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "AckPolicy") {
			t.Errorf("%s: Run = %v, want an error naming AckPolicy", c.Durable, err)
		}
	}
}
