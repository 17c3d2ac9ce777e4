package rabbitinbox

import (
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// ctl runs rabbitmqctl, skipping the test when it cannot be run here.
func ctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Skipf("rabbitmqctl %s: %v: %s", args[0], err, out)
	}
}

// TestCredentialThatStopsWorking: the receiver's user has its password
// changed and its connection is lost. The receiver keeps trying (the
// broker refusing it each time) rather than giving up, and consumes again
// once the password works again: nothing published meanwhile is lost.
func TestCredentialThatStopsWorking(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	user := "bt_cred_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	ctl(t, "add_user", user, "first-secret")
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	ctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	p := inboxtest.NewProxy(t, u.Host)
	u.Host = p.Addr()
	u.User = url.UserPassword(user, "first-secret")

	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	queue, ch := newQueue(t, admin)
	in := e.RecordingInbox()
	r, err := New(Config{Inbox: in, URL: u.String(), Queue: queue, Logger: inboxtest.Quiet,
		ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sessions := make(chan struct{}, 10)
	retries := make(chan struct{}, 100)
	r.consuming = func() { sessions <- struct{}{} }
	r.reconnecting = func() {
		select {
		case retries <- struct{}{}:
		default:
		}
	}
	e.Go("receiver", r.Run)
	e.Go("inbox", in.Run)
	inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
	publish(t, e.Ctx, ch, queue, "m1", "order-1")
	e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 1 })

	ctl(t, "change_password", user, "second-secret")
	p.Cut()
	publish(t, e.Ctx, ch, queue, "m2", "order-1")
	inboxtest.Await(t, e.Ctx, "refused tries", retries, 3)
	select {
	case <-sessions:
		t.Fatal("a session started with the password changed")
	default:
	}
	ctl(t, "change_password", user, "first-secret")
	inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
	e.WaitFor("m2 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
	if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m1@1", "m2@1"}) {
		t.Errorf("handled %v, want m1 then m2, once each", got)
	}
}
