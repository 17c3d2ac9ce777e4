package natsinbox

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestShutdownGivesBackWhatItHolds stops a receiver while it stores one
// message and holds the next, delivered into its iterator's buffer: the
// held one is given back (Nak) as the receiver stops, and the next
// receiver on the consumer has it at once. Before, it was dropped with the
// iterator and left unacknowledged, so the consumer (one message in
// flight, as a deployment runs it, or two here) waited out its AckWait,
// 30 s by default, after every shutdown that caught a message in hand
// (here an hour: the test fails at its 15 s deadline).
func TestShutdownGivesBackWhatItHolds(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		src := newSource(t, e.Ctx, js, time.Hour)
		cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: "inbox",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, MaxAckPending: 2})
		if err != nil {
			t.Fatal(err)
		}
		in := e.NewInbox(e.Config())
		r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		stored, release := make(chan struct{}), make(chan struct{})
		r.afterStore = func(jetstream.Msg) {
			close(stored)
			<-release
		}
		ctx, stop := context.WithCancel(e.Ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		src.publish(t, e.Ctx, "m1", "s")
		inboxtest.Await(t, e.Ctx, "m1 stored", stored, 1)
		src.publish(t, e.Ctx, "m2", "s")
		e.WaitFor("m2 delivered to the receiver", func() bool {
			info, err := cons.Info(e.Ctx)
			return err == nil && info.NumAckPending == 2
		})
		stop()
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		in.Handle("order.created", e.Record)
		r2, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		e.Go("receiver", r2.Run)
		e.Go("inbox", in.Run)
		// m2 comes to r2 at once, not after the hour of its AckWait.
		deadline := time.Now().Add(15 * time.Second)
		e.WaitFor("both handled", func() bool {
			if time.Now().After(deadline) {
				t.Fatalf("m2 not handled within 15 s of the first receiver's stop: it was not given back")
			}
			return in.Relay().Stats().Delivered == 2
		})
		if got := e.Handled()["s"]; !slices.Equal(got, []string{"m1@1", "m2@1"}) {
			t.Errorf("handled %v, want m1 and m2, once each", got)
		}
	})
}
