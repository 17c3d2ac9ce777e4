package natsinbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestConsumerRequestLimitsAreKept reads consumers that bound the pull
// requests they take: at most 10 messages (MaxRequestBatch), or a wait of
// at most 2 s (MaxRequestExpires). The server refuses a pull over either,
// and the receiver asked again, with the same pull, for ever: it read
// nothing, with nothing said above debug level. Each message must be
// handled.
func TestConsumerRequestLimitsAreKept(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "max-batch", MaxRequestBatch: 10},
		{Durable: "max-expires", MaxRequestExpires: 2 * time.Second},
	} {
		t.Run(c.Durable, func(t *testing.T) {
			t.Parallel()
			e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
			ctx, cancel := context.WithTimeout(e.Ctx, 15*time.Second)
			defer cancel()
			e.Ctx = ctx
			src := newSource(t, ctx, js, 30*time.Second)
			in := e.RecordingInbox()
			c.AckPolicy, c.AckWait = jetstream.AckExplicitPolicy, 30*time.Second
			cons, err := js.CreateOrUpdateConsumer(ctx, src.stream, c)
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
			if err != nil {
				t.Fatal(err)
			}
			src.publish(t, ctx, "m1", "s")
			e.Go("receiver", r.Run)
			e.Go("inbox", in.Run)
			e.WaitHandled(in, "s", "m1@1")
		})
	}
}

// TestConsumerRequestExpiresUnderASecondIsRefused reads a consumer whose
// MaxRequestExpires is shorter than any pull the client sends (1 s): Run
// must refuse it, naming MaxRequestExpires.
func TestConsumerRequestExpiresUnderASecondIsRefused(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 30*time.Second)
	cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: "short-expires",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxRequestExpires: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Inbox: e.RecordingInbox(), Consumer: cons, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "MaxRequestExpires") {
		t.Errorf("Run = %v, want an error naming MaxRequestExpires", err)
	}
}
