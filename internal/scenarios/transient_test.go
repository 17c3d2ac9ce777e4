package scenarios

import (
	"slices"
	"testing"

	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
)

// TestTransientFaultThenSuccess: the webhook answers a message 503 twice,
// then 200. Either way the relay rides it out, it delivers the message
// exactly once, charges no attempt (a 503 blames the destination) and
// dead-letters nothing.
func TestTransientFaultThenSuccess(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		t.Run("in-process retries", func(t *testing.T) { transientInProcess(t, b) })
		t.Run("durable retries", func(t *testing.T) { transientDurable(t, b) })
	})
}

// transientInProcess: three in-process tries (no wait between them, so
// the fake clock need not move) ride out the blip inside one delivery
// attempt: three requests, all "attempt 1", two in-process retries.
func transientInProcess(t *testing.T, b backend) {
	e := newEnv(t, b)
	h := e.newHook()
	flaky, other := stream("orders", 1)[0], stream("other", 1)[0]
	e.enqueue(flaky, other)
	h.onPayload("orders-0", failing(2, reply{status: 503, body: "warming up"}))
	rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{dest: {
		Transport: h.transport("relay-1", false),
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(0, false)),
	}}})
	e.waitFor("both delivered", func() bool { return e.gone(flaky, other) })
	e.settle()

	if got := statuses(h, "orders-0"); !slices.Equal(got, []int{503, 503, 200}) {
		t.Fatalf("answers to the flaky message = %v, want 503, 503, 200", got)
	}
	for _, rq := range h.requests() {
		if attempt(rq) != 1 {
			t.Errorf("%s sent as attempt %q: in-process tries are one attempt", rq.payload, rq.attempt)
		}
	}
	if d := h.delivered(); len(d) != 2 {
		t.Fatalf("delivered %v, want each message once", d)
	}
	s := rn.r.Stats()
	if s.Delivered != 2 || s.Retries != 2 || s.Failed != 0 || s.Released != 0 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v, want 2 delivered after 2 in-process retries", s)
	}
	if n := len(e.deadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// transientDurable: with one try per attempt each 503 gives the message
// back to the store, re-scheduled after the destination's back-off,
// without charging an attempt; the next attempts go when the fake clock
// passes it.
func transientDurable(t *testing.T, b backend) {
	e := newEnv(t, b)
	h := e.newHook()
	m := stream("orders", 1)[0]
	e.enqueue(m)
	h.onPayload("orders-0", failing(2, reply{status: 503, body: "warming up"}))
	rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{dest: {
		Transport: h.transport("relay-1", false),
		InProcess: retry.NewConfig(1, nil),
	}}})
	for want := 1; want <= 2; want++ {
		e.waitFor("a 503", func() bool { return h.count("orders-0") == want })
		e.settle()
		got := e.get(m.ID)
		if got == nil || got.Attempts != 0 || !got.DeadLetteredAt.IsZero() || got.InstanceID != "" {
			t.Fatalf("after 503 #%d the message is %+v: want it waiting, not charged", want, got)
		}
		if !got.ScheduledFor.After(e.clk.Now()) {
			t.Fatalf("after 503 #%d the message is due at once (%v): want the destination's back-off", want, got.ScheduledFor)
		}
		if got.Error == "" {
			t.Fatalf("after 503 #%d no error recorded", want)
		}
		e.advance(got.ScheduledFor.Sub(e.clk.Now()))
	}
	e.waitFor("delivery", func() bool { return e.gone(m) })
	e.settle()

	if got := statuses(h, "orders-0"); !slices.Equal(got, []int{503, 503, 200}) {
		t.Fatalf("answers = %v, want 503, 503, 200", got)
	}
	for _, rq := range h.requests() {
		if attempt(rq) != 1 {
			t.Errorf("request sent as attempt %q: destination faults must not charge attempts", rq.attempt)
		}
	}
	s := rn.r.Stats()
	if s.Delivered != 1 || s.Released != 2 || s.Failed != 0 || s.DeadLettered != 0 || s.Retries != 0 {
		t.Fatalf("stats = %+v, want 1 delivered after 2 releases", s)
	}
	if n := len(e.deadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// statuses returns the answers to the requests carrying payload p.
func statuses(h *hook, p string) []int {
	var out []int
	for _, rq := range h.requests() {
		if rq.payload == p {
			out = append(out, rq.status)
		}
	}
	return out
}
