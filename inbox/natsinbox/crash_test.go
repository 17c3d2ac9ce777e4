package natsinbox

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/relay"
)

// The crash test re-executes the test binary as a child that receives
// from the stream crashEnv names ("<kind>|<store spec>|<stream>"), prints
// childReady once a message is stored and before it is acknowledged, and
// blocks there until the parent kills it with SIGKILL.
const (
	crashEnv   = "BACKSTOP_NATSINBOX_CRASH_CHILD"
	childReady = "BACKSTOP-NATSINBOX-CHILD-STORED"
)

// TestCrashChild is the child process of TestCrashBeforeAck; it skips
// unless started by it.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("runs only as the child process of TestCrashBeforeAck")
	}
	parts := strings.Split(spec, "|")
	var k inboxtest.Kind
	for _, kk := range inboxtest.Kinds {
		if kk.Name == parts[0] {
			k = kk
		}
	}
	s, _ := k.Open(t, parts[1], inboxtest.StoreConfig(nil))
	in, err := inbox.New(s, inbox.Config{Name: "orders", Relay: relay.Config{Logger: inboxtest.Quiet}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(context.Background(), parts[2], "inbox")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Inbox: in, Consumer: c, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.afterStore = func(jetstream.Msg) {
		fmt.Println(childReady)
		select {} // until killed
	}
	err = r.Run(context.Background())
	t.Fatalf("Run returned (%v); the child should have been killed before its ack", err)
}

// TestCrashBeforeAck kills a receiving process between storing a message
// and acknowledging it: JetStream delivers the message again to the next
// receiver, which drops it as a duplicate, and the message is handled
// once.
func TestCrashBeforeAck(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		src := newSource(t, e.Ctx, js, time.Second)
		src.publish(t, e.Ctx, "a", "order-1")
		src.publish(t, e.Ctx, "b", "order-1")

		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+k.Name+"|"+e.Spec+"|"+src.stream)
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
			t.Fatalf("the child ended without storing a message:\n%s\n%s", strings.Join(seen, "\n"), stderr.String())
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("child: %v, want killed", err)
		}
		if n := e.OutboxRows("inbox:orders"); n != 1 {
			t.Fatalf("%d inbox rows after the crash, want 1 (a, stored and not acknowledged)", n)
		}

		in := e.RecordingInbox()
		r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		// a comes again once its AckWait (1 s) has passed.
		e.WaitFor("a redelivered and b received", func() bool {
			return e.Counter("backstop_inbox_duplicates_total", "source", "nats") == 1 &&
				in.Relay().Stats().Delivered == 2
		})
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"a@1", "b@1"}) {
			t.Errorf("handled %v, want [a@1 b@1]", got)
		}
	})
}
