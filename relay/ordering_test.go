package relay

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// failFirst fails the first delivery of payload with err.
func failFirst(payload string, err error) func(context.Context, *outbox.Message, int) error {
	var failed atomic.Bool
	return func(_ context.Context, m *outbox.Message, _ int) error {
		if string(m.Payload) == payload && failed.CompareAndSwap(false, true) {
			return err
		}
		return nil
	}
}

var messageFault = errorhandling.WithBlame(errorhandling.Transient(errors.New("rejected for now")), errorhandling.BlameMessage)

func TestStrictStreamCascadesReleaseBehindAFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"message fault", messageFault},
		{"destination fault", errorhandling.WithHTTPStatus(errors.New("502 bad gateway"), 502)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m1, m2, m3 := msg("orders", "s", 1), msg("orders", "s", 2), msg("orders", "s", 3)
			e.enqueue(m1, m2, m3)
			rec := &recorder{fn: failFirst(string(m1.Payload), tc.err)}
			rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
			rn.settle()

			if got := rec.got(); !slices.Equal(got, []string{"payload-s-1"}) {
				t.Fatalf("deliveries = %v: later messages went past the failure", got)
			}
			for _, m := range []*outbox.Message{m2, m3} {
				got := e.get(m.ID)
				if got == nil || got.InstanceID != "" || !got.LeaseExpiry.IsZero() || got.Attempts != 0 || got.Error != "" {
					t.Fatalf("cascade-released message = %+v", got)
				}
			}
			if s := rn.r.Stats(); s.Released < 2 {
				t.Fatalf("stats = %+v", s)
			}
			rn.advance(time.Minute)
			want := []string{"payload-s-1", "payload-s-1", "payload-s-2", "payload-s-3"}
			if got := rec.got(); !slices.Equal(got, want) {
				t.Fatalf("deliveries = %v, want %v", got, want)
			}
		})
	}
}

func TestReleaseOrderingLetsLaterMessagesGoOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingRelease))
	m1, m2, m3 := msg("orders", "s", 1), msg("orders", "s", 2), msg("orders", "s", 3)
	e.enqueue(m1, m2, m3)
	rec := &recorder{fn: failFirst(string(m1.Payload), messageFault)}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	if got, want := rec.got(), []string{"payload-s-1", "payload-s-2", "payload-s-3"}; !slices.Equal(got, want) {
		t.Fatalf("deliveries = %v, want %v", got, want)
	}
	if got := e.get(m1.ID); got == nil || got.Attempts != 1 {
		t.Fatalf("failed message = %+v", got)
	}
	if e.get(m2.ID) != nil || e.get(m3.ID) != nil {
		t.Fatal("later messages not delivered")
	}
	rn.advance(time.Minute)
	if e.get(m1.ID) != nil {
		t.Fatal("failed message not delivered on retry")
	}
}

func TestMessageOrderingOverridesDestination(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // strict by default
	m1, m2 := msg("orders", "s", 1), msg("orders", "s", 2)
	m1.Ordering, m2.Ordering = outbox.OrderingNone, outbox.OrderingNone
	e.enqueue(m1, m2)
	rec := &recorder{fn: failFirst(string(m1.Payload), messageFault)}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	if e.get(m2.ID) != nil {
		t.Fatal("an unordered message was held back by a failure")
	}
}

func TestDestinationConcurrencyIsRespected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var slow, fast []*outbox.Message
	for i := range 3 {
		slow = append(slow, msg("slow", "", i))
		fast = append(fast, msg("fast", "", i))
	}
	e.enqueue(append(slow, fast...)...)
	gate := make(chan struct{})
	var inSlow, maxSlow, fastDone atomic.Int64
	allFast, slowStarted := make(chan struct{}), make(chan struct{})
	slowRec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			close(slowStarted)
		}
		n := inSlow.Add(1)
		for m := maxSlow.Load(); n > m && !maxSlow.CompareAndSwap(m, n); m = maxSlow.Load() {
		}
		<-gate
		inSlow.Add(-1)
		return nil
	}}
	fastRec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		if fastDone.Add(1) == 3 {
			close(allFast)
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: slowRec.transport(), Concurrency: 1, Timeout: time.Hour},
		"fast": {Transport: fastRec.transport()},
	})
	cfg.Workers = 4
	rn := e.start(cfg)
	for _, ch := range []chan struct{}{slowStarted, allFast} { // a blocked destination does not hold up another
		select {
		case <-ch:
		case <-e.waitDone():
			t.Fatal("a destination starved")
		}
	}
	if n := len(slowRec.got()); n != 1 {
		t.Fatalf("slow deliveries in progress = %d, want 1", n)
	}
	close(gate)
	rn.settle()
	if maxSlow.Load() != 1 || len(slowRec.got()) != 3 {
		t.Fatalf("max concurrent slow deliveries %d, total %d", maxSlow.Load(), len(slowRec.got()))
	}
}
