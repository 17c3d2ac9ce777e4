package rabbitmq_test

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// ctl runs rabbitmqctl, skipping the test when it cannot be run here.
func ctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Skipf("rabbitmqctl %s: %v: %s", args[0], err, out)
	}
}

// TestCredentialThatStopsWorking: the transport's user has its password
// changed while it publishes. The open connection goes on; once it is
// lost, each Deliver fails as access_refused (transient, the
// destination's: no message uses up its attempts), without the password
// in the error, until the password works again.
func TestCredentialThatStopsWorking(t *testing.T) {
	t.Parallel()
	a := connect(t)
	user := "bt_cred_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	ctl(t, "add_user", user, "first-secret")
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	ctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "first-secret")

	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", nil)
	tr := newTransport(t, rabbitmq.Config{URL: u.String(), Exchange: ex})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatal(err)
	}
	ctl(t, "change_password", user, "second-secret")
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver on the connection opened before the change: %v", err)
	}
	rabbitmq.DropConnection(tr)
	for range 2 {
		err := tr.Deliver(ctx, message(t))
		wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "access_refused")
		if strings.Contains(err.Error(), "first-secret") {
			t.Fatalf("the error shows the password: %v", err)
		}
	}
	ctl(t, "change_password", user, "first-secret")
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver once the password works again: %v", err)
	}
}
