package rabbitinbox

import (
	"net/url"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// streamQueue declares a stream queue of the test's own.
func streamQueue(t *testing.T, conn *amqp.Connection) (string, *amqp.Channel) {
	t.Helper()
	return declareQueue(t, conn, true, amqp.Table{"x-queue-type": "stream"})
}

// TestStreamQueueResumesAfterARestart: a stream queue keeps its messages
// and a consumer chooses where it starts. The receiver started at new
// messages only, so what was published while it was stopped (a deploy, a
// crash) was never received. A receiver started again now receives it,
// and the messages it had received already are dropped as duplicates.
func TestStreamQueueResumesAfterARestart(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := streamQueue(t, conn)
		in := e.RecordingInbox()
		e.Go("inbox", in.Run)
		start := func() (stop func()) {
			r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: inboxtest.Quiet})
			if err != nil {
				t.Fatal(err)
			}
			sessions := make(chan struct{}, 10)
			r.consuming = func() { sessions <- struct{}{} }
			stop = e.Start("receiver", r.Run)
			inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
			return stop
		}

		stop := start()
		publish(t, e.Ctx, ch, queue, "m1", "order-1")
		publish(t, e.Ctx, ch, queue, "m2", "order-1")
		e.WaitFor("m1 and m2 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		stop()

		// Published while no receiver runs.
		publish(t, e.Ctx, ch, queue, "m3", "order-1")
		publish(t, e.Ctx, ch, queue, "m4", "order-1")
		stop = start()
		defer stop()
		publish(t, e.Ctx, ch, queue, "m5", "order-1")
		e.WaitFor("m3, m4 and m5 handled", func() bool { return in.Relay().Stats().Delivered == 5 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m1@1", "m2@1", "m3@1", "m4@1", "m5@1"}) {
			t.Errorf("handled %v, want m1 to m5 once each, in order", got)
		}
	})
}

// TestStreamQueueResumesAfterAReconnect: a receiver whose connection is
// lost consumes again from the message after the last it handled: what
// was published meanwhile is received, and nothing before it is read
// again.
func TestStreamQueueResumesAfterAReconnect(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := streamQueue(t, admin)
		in := e.RecordingInbox()
		p := inboxtest.NewProxy(t, u.Host)
		via := *u
		via.Host = p.Addr()
		r, err := New(Config{Inbox: in, URL: via.String(), Queue: queue, Logger: inboxtest.Quiet,
			ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sessions := make(chan struct{}, 10)
		r.consuming = func() { sessions <- struct{}{} }
		published := false
		r.reconnecting = func() {
			// Before the receiver consumes again.
			if !published {
				publish(t, e.Ctx, ch, queue, "m3", "order-1")
				published = true
			}
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
		publish(t, e.Ctx, ch, queue, "m1", "order-1")
		publish(t, e.Ctx, ch, queue, "m2", "order-1")
		e.WaitFor("m1 and m2 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		p.Cut()
		e.WaitFor("m3 handled", func() bool { return in.Relay().Stats().Delivered == 3 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m1@1", "m2@1", "m3@1"}) {
			t.Errorf("handled %v, want m1 to m3 once each, in order", got)
		}
		if n := e.Counter("backstop_inbox_duplicates_total", "source", "amqp"); n != 0 {
			t.Errorf("duplicates_total = %d, want 0: the receiver read again what it had handled", n)
		}
	})
}

// TestStreamReplay: a first session starts within the inbox's
// de-duplication window, so that what it reads again is recognised.
func TestStreamReplay(t *testing.T) {
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	for _, c := range []struct{ window, want time.Duration }{
		{7 * 24 * time.Hour, 7*24*time.Hour - time.Hour},
		{time.Hour, 54 * time.Minute},
		{time.Minute, 54 * time.Second},
	} {
		cfg := e.Config()
		cfg.DedupWindow = c.window
		r, err := New(Config{Inbox: e.NewInbox(cfg), URL: testenv.AMQPURL(), Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.streamReplay(); got != c.want {
			t.Errorf("window %v: replay %v, want %v", c.window, got, c.want)
		}
	}
}
