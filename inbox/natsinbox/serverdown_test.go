package natsinbox

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestServerDownAtStart starts a receiver while its NATS server cannot be
// reached (a proxy that refuses connections) and opens the way after it
// tried three times: the receiver keeps trying meanwhile, Reading says
// why it does not read, the outage is one warning (the tries after it at
// debug level), and once the server is back the receiver reads and a
// message published is stored and handled. Before, Run returned the first
// read's error: a server down when serve started, or gone for a moment
// just after, stopped serve.
func TestServerDownAtStart(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 2*time.Second)
	in := e.RecordingInbox()

	p := inboxtest.NewProxy(t, u.Host)
	disconnected := make(chan struct{}, 10)
	// No reconnect buffer: a request while the connection is down fails
	// at once rather than after its timeout.
	nc, err := nats.Connect("nats://"+p.Addr(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := rjs.Consumer(e.Ctx, src.stream, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	p.Refuse()
	inboxtest.Await(t, e.Ctx, "the connection lost", disconnected, 1)

	logs, log := inboxtest.NewLogs()
	r, err := New(Config{Inbox: in, Consumer: cons, Logger: log,
		RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	retries, reads := make(chan struct{}, 100), make(chan struct{}, 100)
	r.retrying = func() {
		select {
		case retries <- struct{}{}:
		default:
		}
	}
	r.reading = func() { reads <- struct{}{} }
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for i := range 3 {
		select {
		case <-retries:
		case err := <-done:
			t.Fatalf("Run returned %v after %d tries while the server was down, want it to keep trying", err, i+1)
		case <-e.Ctx.Done():
			t.Fatal(e.Ctx.Err())
		}
	}
	if ok, why := r.Reading(); ok || why == nil || errors.Is(why, errNotStarted) {
		t.Errorf("Reading while the server is down = %v, %v; want false and why", ok, why)
	}
	const outage = "not reading the consumer"
	if n := logs.Count(slog.LevelWarn, outage); n != 1 {
		t.Errorf("%d warnings for the outage, want 1", n)
	}
	if n := logs.Count(slog.LevelDebug, outage); n < 2 {
		t.Errorf("%d debug records for the outage's later tries, want at least 2", n)
	}

	p.Accept()
	inboxtest.Await(t, e.Ctx, "the receiver to read", reads, 1)
	src.publish(t, e.Ctx, "m1", "s")
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
	if ok, why := r.Reading(); !ok {
		t.Errorf("Reading once the server is back = false, %v; want true", why)
	}
	if n := logs.Count(slog.LevelInfo, "session started again"); n != 1 {
		t.Errorf("%d records of reading again, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}
