package rabbitinbox

import (
	"net/url"
	"slices"
	"strings"
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
// from the cursor its predecessor saved: it reads nothing again (it read
// the last DedupWindow of the stream again, each message a duplicate).
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
			started := sessions(r)
			stop = e.Start("receiver", r.Run)
			inboxtest.Await(t, e.Ctx, "a session", started, 1)
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
		if n := e.Counter("backstop_inbox_duplicates_total", "source", "amqp"); n != 0 {
			t.Errorf("duplicates_total = %d, want 0: the receiver started again read what it had handled", n)
		}
	})
}

// TestStreamQueueResumesAtItsCursor: a receiver started again starts at
// the cursor saved in the inbox's store, however long ago it stopped:
// what it had handled is not read again, and what came after is.
// (Without the cursor it started at the last DedupWindow of the stream,
// by the broker's clock, and a receiver stopped for longer lost what was
// published before that.) The cursor here says m1 and m2 were handled.
func TestStreamQueueResumesAtItsCursor(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := streamQueue(t, conn)
		in := e.RecordingInbox()
		for _, id := range []string{"m1", "m2", "m3"} { // offsets 0, 1 and 2
			publish(t, e.Ctx, ch, queue, id, "order-1")
		}
		r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.SaveCursor(e.Ctx, r.cursorSource(), 2); err != nil {
			t.Fatal(err)
		}
		started := sessions(r)
		e.Go("inbox", in.Run)
		stop := e.Start("receiver", r.Run)
		inboxtest.Await(t, e.Ctx, "a session", started, 1)
		publish(t, e.Ctx, ch, queue, "m4", "order-1")
		e.WaitFor("m3 and m4 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m3@1", "m4@1"}) {
			t.Errorf("handled %v, want m3 and m4, from the cursor on", got)
		}
		// The cursor follows what the receiver handled: saved as it stops.
		stop()
		if next, ok, err := in.Cursor(e.Ctx, r.cursorSource()); err != nil || !ok || next != 4 {
			t.Errorf("cursor after the receiver stopped: %d, %v, %v; want 4 (past m4)", next, ok, err)
		}
	})
}

// TestCursorSource: a queue name a store cannot key a row on (AMQP
// names are any bytes) is given in hexadecimal.
func TestCursorSource(t *testing.T) {
	for q, want := range map[string]string{
		"orders":       "rabbitmq:orders",
		"a b\tc\u2028": "rabbitmq:a b\tc\u2028",
		"a\x00b":       "rabbitmq-hex:610062",
		"\xff":         "rabbitmq-hex:ff",
	} {
		r := &Receiver{cfg: Config{Queue: q}}
		if got := r.cursorSource(); got != want {
			t.Errorf("queue %q: cursor source %q, want %q", q, got, want)
		}
	}
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

// TestStreamCursorUnreadable: while the saved cursor cannot be read (its
// table gone here; the database down in life) the receiver does not
// consume, and says why, rather than start from the replay, which could
// skip what a receiver stopped for longer had not received. Once it can
// read the cursor it starts there.
func TestStreamCursorUnreadable(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := streamQueue(t, conn)
		in := e.RecordingInbox()
		publish(t, e.Ctx, ch, queue, "m1", "order-1") // offset 0
		publish(t, e.Ctx, ch, queue, "m2", "order-1") // offset 1
		r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: inboxtest.Quiet,
			ReconnectDelay: time.Millisecond, MaxReconnectDelay: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.SaveCursor(e.Ctx, r.cursorSource(), 1); err != nil {
			t.Fatal(err)
		}
		table, moved := k.Table(e.Spec, "backstop_inbox_cursors"), "backstop_inbox_cursors_away"
		e.Exec(`ALTER TABLE ` + table + ` RENAME TO ` + moved)
		started, retries := sessions(r), make(chan struct{}, 1000)
		r.reconnecting = func() { retries <- struct{}{} }
		e.Go("inbox", in.Run)
		e.Go("receiver", r.Run)
		inboxtest.Await(t, e.Ctx, "a failed session", retries, 2)
		if live, why := r.Consuming(); live || why == nil || !strings.Contains(why.Error(), "stream cursor") {
			t.Errorf("Consuming() = %v, %v; want false, with the cursor's error", live, why)
		}
		if len(started) != 0 {
			t.Fatal("the receiver consumed without its cursor")
		}
		e.Exec(`ALTER TABLE ` + k.Table(e.Spec, moved) + ` RENAME TO backstop_inbox_cursors`)
		inboxtest.Await(t, e.Ctx, "a session", started, 1)
		e.WaitFor("m2 handled", func() bool { return in.Relay().Stats().Delivered == 1 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m2@1"}) {
			t.Errorf("handled %v, want m2 alone, from the cursor on", got)
		}
	})
}
