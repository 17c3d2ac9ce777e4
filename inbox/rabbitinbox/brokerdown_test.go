package rabbitinbox

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestBrokerDownAtStart starts a receiver while its broker cannot be
// reached (a proxy that refuses connections) and opens the way after it
// tried three times: the receiver keeps trying meanwhile, Consuming says
// why it does not consume, the outage is one warning (the tries after it
// at debug level), and once the broker is back the receiver consumes and
// a message published is stored and handled. Before, Run returned the
// first dial's error: a broker down when serve started stopped serve.
func TestBrokerDownAtStart(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	queue, ch := newQueue(t, admin)
	in := e.RecordingInbox()
	p := inboxtest.NewProxy(t, u.Host)
	p.Refuse()
	via := *u
	via.Host = p.Addr()
	logs, log := inboxtest.NewLogs()
	r, err := New(Config{Inbox: in, URL: via.String(), Queue: queue, Logger: log,
		ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	retries, sessions := make(chan struct{}, 100), make(chan struct{}, 100)
	r.reconnecting = func() {
		select {
		case retries <- struct{}{}:
		default:
		}
	}
	r.consuming = func() { sessions <- struct{}{} }
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for i := range 3 {
		select {
		case <-retries:
		case err := <-done:
			t.Fatalf("Run returned %v after %d tries while the broker was down, want it to keep trying", err, i+1)
		case <-e.Ctx.Done():
			t.Fatal(e.Ctx.Err())
		}
	}
	if ok, why := r.Consuming(); ok || why == nil || errors.Is(why, errNotStarted) {
		t.Errorf("Consuming while the broker is down = %v, %v; want false and why", ok, why)
	}
	const outage = "not consuming the queue"
	if n := logs.Count(slog.LevelWarn, outage); n != 1 {
		t.Errorf("%d warnings for the outage, want 1", n)
	}
	if n := logs.Count(slog.LevelDebug, outage); n < 2 {
		t.Errorf("%d debug records for the outage's later tries, want at least 2", n)
	}

	p.Accept()
	inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
	publish(t, e.Ctx, ch, queue, "m1", "s")
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
	if ok, why := r.Consuming(); !ok {
		t.Errorf("Consuming once the broker is back = false, %v; want true", why)
	}
	if n := logs.Count(slog.LevelInfo, "session started again"); n != 1 {
		t.Errorf("%d records of consuming again, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestPermanentAtStart: what no retry cures still stops the first
// session: a missing queue (TestFirstSessionFails), and credentials the
// broker refuses.
func TestPermanentAtStart(t *testing.T) {
	t.Parallel()
	connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("backstop_no_such_user", "wrong")
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	in := e.NewInbox(e.Config())
	r, err := New(Config{Inbox: in, URL: u.String(), Queue: "q", Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(e.Ctx)
	if err == nil || !IsPermanent(err) {
		t.Fatalf("Run with refused credentials = %v, want a permanent error", err)
	}
}

// TestLoginCutAtStart: a broker that hangs up in the middle of the
// receiver's first login (restarting as serve starts) is tried again, as
// one that could not be reached; the receiver then consumes. Before, the
// client's report of the cut (amqp.ErrCredentials) was taken for refused
// credentials, and Run returned it as permanent: the source stopped.
func TestLoginCutAtStart(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	queue, ch := newQueue(t, admin)
	in := e.RecordingInbox()
	cut := transporttest.NewLoginCut(t, u.Host, 1)
	via := *u
	via.Host = cut.Addr
	r, err := New(Config{Inbox: in, URL: via.String(), Queue: queue, Logger: inboxtest.Quiet,
		ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sessions := make(chan struct{}, 100)
	r.consuming = func() { sessions <- struct{}{} }
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-sessions:
	case err := <-done:
		t.Fatalf("Run = %v after a login cut short, want it to try again and consume", err)
	case <-e.Ctx.Done():
		t.Fatal(e.Ctx.Err())
	}
	if cut.Cut() != 1 {
		t.Fatalf("%d logins cut, want 1", cut.Cut())
	}
	publish(t, e.Ctx, ch, queue, "m1", "s")
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestTLSRefusedAtStart: a TLS handshake that cannot succeed as
// configured stops the first session, as refused credentials do: a
// broker certificate no trusted authority signed, and amqps:// to a port
// that does not speak TLS. Before, the receiver took both for a broker it
// could not reach and tried again for ever.
func TestTLSRefusedAtStart(t *testing.T) {
	t.Parallel()
	untrusted, _ := transporttest.UntrustedTLS(t)
	plain, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	in := e.NewInbox(e.Config())
	for name, addr := range map[string]string{
		"untrusted certificate": untrusted,
		"not a TLS port":        plain.Host,
	} {
		r, err := New(Config{Inbox: in, URL: "amqps://guest:guest@" + addr + "/", Queue: "q", Logger: inboxtest.Quiet,
			ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(e.Ctx, time.Minute)
		err = r.Run(ctx)
		cancel()
		if err == nil || !IsPermanent(err) || !strings.Contains(err.Error(), "tls") {
			t.Errorf("%s: Run = %v, want the TLS error as permanent", name, err)
		}
	}
}
