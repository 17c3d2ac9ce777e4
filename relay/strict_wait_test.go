package relay

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// gated is a store whose calls recording a completion wait for the test's
// verdict: nil lets the call through, anything else is what it returns
// instead.
type gated struct {
	store.Store
	recording chan *store.Batch // a recording call arrived
	verdict   chan gateVerdict  // what it does
}

type gateVerdict struct {
	res *store.Result // returned as is when err is nil and res is set
	err error
}

func (s *gated) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if len(b.Completions) == 0 {
		return s.Store.ProcessBatch(ctx, b)
	}
	s.recording <- b
	v := <-s.verdict
	if v.err != nil {
		return nil, v.err
	}
	if v.res != nil {
		return v.res, nil
	}
	return s.Store.ProcessBatch(ctx, b)
}

// TestStrictStreamWaitsForTheRecording: the two messages of a strict
// stream are claimed together, and the second is not sent until the store
// has recorded the delivery of the first, so that a stall before that
// recording cannot let another instance send the first again after the
// second. When the recording fails (the call fails, or the store refuses
// the outcome) the second is given back, not sent; the first is sent again
// once its lease lapses, and the second after it.
func TestStrictStreamWaitsForTheRecording(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(b *store.Batch) gateVerdict // nil: the recording succeeds
	}{
		{"recorded", nil},
		{"call fails", func(*store.Batch) gateVerdict { return gateVerdict{err: errors.New("connection reset")} }},
		{"outcome refused", func(b *store.Batch) gateVerdict {
			return gateVerdict{res: &store.Result{Rejected: []store.Rejection{{ID: b.Completions[0].ID, Err: errors.New("refused")}}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m1, m2 := msg("orders", "s", 1), msg("orders", "s", 2)
			e.enqueue(m1, m2)
			early := make(chan string, 8)
			rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
				early <- string(m.Payload)
				return nil
			}}
			gs := &gated{Store: e.s, recording: make(chan *store.Batch), verdict: make(chan gateVerdict)}
			r, err := New(gs, e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan *outbox.Message, 1)
			r.hooks.onWait = func(m *outbox.Message) { waiting <- m }
			rn := e.run(r)

			if got := <-early; got != string(m1.Payload) {
				t.Fatalf("first delivery = %s", got)
			}
			b := <-gs.recording
			if len(b.Completions) != 1 || b.Completions[0].ID != m1.ID {
				t.Fatalf("recording call = %+v, want the completion of message 1", b)
			}
			// The recorder holds the completion of message 1 and the rest
			// of the stream's task waits for its word: message 2 must not
			// go now.
			select {
			case got := <-early:
				t.Fatalf("%s was sent before the delivery of message 1 was recorded", got)
			case w := <-waiting:
				if w.ID != m1.ID {
					t.Fatalf("the stream waits on %s", w.Payload)
				}
			}
			if tc.fail == nil {
				gs.verdict <- gateVerdict{}
				passRecordings(gs, rn)
				if got, want := rec.got(), []string{"payload-s-1", "payload-s-2"}; !slices.Equal(got, want) {
					t.Fatalf("deliveries = %v, want %v", got, want)
				}
				return
			}
			gs.verdict <- tc.fail(b)
			// The recorder finds the store reachable and drops the one
			// outcome it cannot record; message 2 is given back.
			rn.waitFor("the dropped outcome", func() bool { return rn.r.Stats().Unrecorded == 1 })
			rn.settle()
			if got, want := rec.got(), []string{"payload-s-1"}; !slices.Equal(got, want) {
				t.Fatalf("deliveries = %v, want %v: message 2 went although message 1 was not recorded", got, want)
			}
			if got := e.get(m2.ID); got == nil || got.InstanceID != "" || got.Attempts != 0 {
				t.Fatalf("message 2 = %+v, want given back uncharged", got)
			}
			if got := e.get(m1.ID); got == nil || got.InstanceID == "" {
				t.Fatalf("message 1 = %+v, want still leased until its lease lapses", got)
			}
			// Once its lease lapses message 1 is sent again, and then 2.
			e.clk.Advance(time.Minute)
			passRecordings(gs, rn)
			if got, want := rec.got(), []string{"payload-s-1", "payload-s-1", "payload-s-2"}; !slices.Equal(got, want) {
				t.Fatalf("deliveries = %v, want %v", got, want)
			}
			if e.get(m1.ID) != nil || e.get(m2.ID) != nil {
				t.Fatal("not delivered in the end")
			}
		})
	}
}

// passRecordings lets every recording call through until the relay has
// settled.
func passRecordings(gs *gated, rn *running) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-gs.recording:
				gs.verdict <- gateVerdict{}
			case <-stop:
				return
			}
		}
	}()
	rn.settle()
	close(stop)
	<-done
}
