package inbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
)

// The crash test re-executes the test binary as a child that runs the
// inbox on the store crashEnv names ("<kind>:<spec>"), prints childReady
// right after a handler's transaction committed, and blocks there, before
// the relay hears of it, until the parent kills it with SIGKILL.
const (
	crashEnv   = "BACKSTOP_INBOX_CRASH_CHILD"
	childReady = "BACKSTOP-INBOX-CHILD-COMMITTED"
)

// orderHandler records msg and enqueues one billing message, in tx.
func (e *env) orderHandler(ctx context.Context, tx store.Tx, msg *Message) error {
	if err := e.record(ctx, tx, msg); err != nil {
		return err
	}
	return tx.Enqueue(ctx, &outbox.Message{Destination: "billing", Type: "invoice.requested", Stream: msg.Stream})
}

// TestCrashChild is the child process of TestCrashAfterCommit; it skips
// unless started by it.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("runs only as the child process of TestCrashAfterCommit")
	}
	name, arg, _ := strings.Cut(spec, ":")
	var k kind
	for _, kk := range kinds {
		if kk.name == name {
			k = kk
		}
	}
	s, _ := k.open(t, arg, store.Config{LeaseDuration: time.Hour, Policies: storeConfig(nil).Policies})
	e := &env{t: t, ctx: context.Background(), k: k, spec: arg, s: s, table: k.table(arg, "handled")}
	in, err := New(s, Config{Name: "orders", Relay: relay.Config{Instance: store.Instance{ID: "child"}, Logger: quiet,
		PollInterval: 10 * time.Millisecond}, Handling: relay.Destination{InProcess: retry.NewConfig(1, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	in.Handle("order.created", e.orderHandler)
	in.afterCommit = func(*Message) {
		fmt.Println(childReady)
		select {} // until killed
	}
	err = in.Run(context.Background())
	t.Fatalf("Run returned (%v); the child should have been killed after its commit", err)
}

// killChildAfterCommit starts the child on spec and kills it once a
// handler's transaction has committed.
func killChildAfterCommit(t *testing.T, spec string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+spec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A child that never gets there is killed after a minute, which
	// ends its output and fails the test below.
	stuck := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer stuck.Stop()
	lines := bufio.NewScanner(out)
	var seen []string
	for lines.Scan() && lines.Text() != childReady {
		seen = append(seen, lines.Text())
	}
	if lines.Text() != childReady {
		_ = cmd.Wait()
		t.Fatalf("the child ended without committing:\n%s\n%s", strings.Join(seen, "\n"), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed", err)
	}
}

// TestCrashAfterCommit kills a process between a handler's commit and the
// relay recording the outcome: the effects, the outgoing message and the
// completion are all there, once; the source's redelivery is a duplicate;
// and another process, once the dead one's leases lapse, handles the rest
// of the stream without handling the first message again.
func TestCrashAfterCommit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		base := time.Now().Truncate(time.Millisecond)
		setup := openEnv(t, k, "", clock.NewFake(base))
		in := setup.newInbox(setup.config())
		setup.receive(in, received("m-1", "order.created", "order-1"))
		setup.receive(in, received("m-2", "order.created", "order-1"))

		killChildAfterCommit(t, k.name+":"+setup.spec)

		// Three hours later by this process's clock, the child's leases
		// (an hour of real time) have lapsed.
		e := openEnv(t, k, setup.spec, clock.NewFake(base.Add(3*time.Hour)))
		if got := e.handled()["order-1"]; !slices.Equal(got, []string{"m-1@1"}) {
			t.Fatalf("after the crash the application holds %v, want [m-1@1]", got)
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'billing'`); n != 1 {
			t.Fatalf("%d billing messages after the crash, want 1", n)
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'inbox:orders'`); n != 1 {
			t.Fatalf("%d inbox rows after the crash, want 1 (m-2; m-1 completed with its effects)", n)
		}

		cfg := e.config()
		after := e.newInbox(cfg)
		var calls callLog
		after.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			calls.add(msg)
			return e.orderHandler(ctx, tx, msg)
		})
		if !e.receive(after, received("m-1", "order.created", "order-1")) {
			t.Fatal("the source's redelivery of m-1 was not a duplicate")
		}
		e.run(after)
		e.waitFor("m-2 handled", func() bool { return after.Relay().Stats().Delivered == 1 })
		if c := calls.String(); c != "m-2@1" {
			t.Errorf("the second process handled %q, want only m-2@1 (stats %+v)", c, after.Relay().Stats())
		}
		if got := e.handled()["order-1"]; !slices.Equal(got, []string{"m-1@1", "m-2@1"}) {
			t.Errorf("the application holds %v, want [m-1@1 m-2@1]", got)
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'billing'`); n != 2 {
			t.Errorf("%d billing messages, want 2", n)
		}
	})
}
