package rabbitmq_test

import (
	"bytes"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestBrokerDownAtNew: a destination whose broker cannot be reached when
// the Transport is made (serve's start) no longer fails New, which
// stopped serve; its deliveries fail as transient faults of the
// destination until the broker is back, then publish.
func TestBrokerDownAtNew(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	q := a.queue(ex, "#", nil)
	_, got := a.readBack(q)
	down := transporttest.NewUnreachable(t)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = down.Addr
	tr, err := rabbitmq.New(rabbitmq.Config{URL: u.String(), Exchange: ex, Timeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New with the broker down = %v, want a Transport that dials later", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	m := message(t)
	ctx := ctxFor(t)
	wantFault(t, tr.Deliver(ctx, m), errorhandling.ClassTransient, errorhandling.BlameDestination, "")

	down.Open(t, target)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver once the broker is back = %v", err)
	}
	if d := got.next(t, ctx); d.MessageId != m.ID.String() {
		t.Errorf("the queue got %q, want %s", d.MessageId, m.ID)
	}
}

// TestBrokerDownAtNewWarnsWithoutThePassword: New's warning of a broker it
// cannot reach names the broker, not the URL's password.
func TestBrokerDownAtNewWarnsWithoutThePassword(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	tr, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:1/", Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatalf("New = %v, want a Transport that dials later", err)
	}
	_ = tr.Close()
	if !strings.Contains(log.String(), "127.0.0.1:1") || strings.Contains(log.String(), "secret") {
		t.Errorf("New logged %q; want the broker named without the password", log.String())
	}
}

// TestLoginCutAtNew: a broker that hangs up in the middle of the login
// (restarting as serve starts) reads to the client as refused
// credentials; New logs in a second time before it believes it, and
// starts. Credentials the broker does refuse still stop New. Before, the
// one cut login failed New, and stopped serve.
func TestLoginCutAtNew(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	q := a.queue(ex, "#", nil)
	_, got := a.readBack(q)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	cut := transporttest.NewLoginCut(t, u.Host, 1)
	via := *u
	via.Host = cut.Addr
	tr, err := rabbitmq.New(rabbitmq.Config{URL: via.String(), Exchange: ex, Timeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New through a login cut short = %v, want it to log in again", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if cut.Cut() != 1 {
		t.Fatalf("%d logins cut, want 1", cut.Cut())
	}
	ctx := ctxFor(t)
	m := message(t)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver = %v", err)
	}
	if d := got.next(t, ctx); d.MessageId != m.ID.String() {
		t.Errorf("the queue got %q, want %s", d.MessageId, m.ID)
	}

	wrong := *u
	wrong.User = url.UserPassword("backstop_no_such_user", "not-the-password")
	if tr, err := rabbitmq.New(rabbitmq.Config{URL: wrong.String(), Timeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)}); err == nil {
		_ = tr.Close()
		t.Fatal("New with credentials the broker refuses = a Transport, want an error")
	} else if strings.Contains(err.Error(), "not-the-password") {
		t.Fatalf("New's error shows the password: %v", err)
	}
}

// TestTLSRefusedAtNew: a TLS handshake that cannot succeed as configured
// is a mistake New reports, as it does refused credentials: a broker
// certificate no trusted authority signed, and amqps:// to a port that
// does not speak TLS. Before, New took both for a broker that could not
// be reached, warned, and let serve start a destination that could never
// deliver.
func TestTLSRefusedAtNew(t *testing.T) {
	t.Parallel()
	untrusted, _ := transporttest.UntrustedTLS(t)
	plain, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{
		"untrusted certificate": untrusted,
		"not a TLS port":        plain.Host,
	} {
		tr, err := rabbitmq.New(rabbitmq.Config{URL: "amqps://guest:guest@" + addr + "/", Timeout: 5 * time.Second,
			Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			_ = tr.Close()
			t.Errorf("%s: New = a Transport, want the handshake's error", name)
			continue
		}
		if !strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "guest:guest") {
			t.Errorf("%s: New = %v; want the TLS error, without the password", name, err)
		}
	}
}
