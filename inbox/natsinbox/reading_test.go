package natsinbox

import (
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestReadingSaysWhy: Reading reports whether the receiver reads its
// consumer, and when it does not, why: not started yet, or the error that
// ended its read (here, a consumer deleted before the receiver could read
// it). serve's /readyz shows it for each NATS source; nothing told an
// operator or an orchestrator that a source was not reading.
func TestReadingSaysWhy(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 2*time.Second)
	newReceiver := func() *Receiver {
		r, err := New(Config{Inbox: e.RecordingInbox(), Consumer: src.consumer, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newReceiver()
	reads := make(chan struct{}, 100)
	r.reading = func() { reads <- struct{}{} }
	if ok, err := r.Reading(); ok || !errors.Is(err, errNotStarted) {
		t.Fatalf("Reading before Run = %v, %v; want false, not started", ok, err)
	}
	e.Go("receiver", r.Run)
	inboxtest.Await(t, e.Ctx, "the receiver to read", reads, 1)
	if ok, err := r.Reading(); !ok || err != nil {
		t.Fatalf("Reading while reading = %v, %v; want true", ok, err)
	}

	if err := js.DeleteConsumer(e.Ctx, src.stream, "inbox"); err != nil {
		t.Fatal(err)
	}
	gone := newReceiver()
	runErr := gone.Run(e.Ctx)
	if runErr == nil {
		t.Fatal("Run on a deleted consumer: nil, want an error")
	}
	if ok, err := gone.Reading(); ok || err == nil || err.Error() != runErr.Error() {
		t.Fatalf("Reading after Run failed with %v = %v, %v; want false and that error", runErr, ok, err)
	}
}
