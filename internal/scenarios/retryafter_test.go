package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/relay"
)

// TestRetryAfterIsHonoured: the webhook answers a message 429 with
// Retry-After: 30. The message is given back without charging an attempt
// (a 429 blames the destination), is not sent again before the fake clock
// passes +30 s, and is delivered at +30 s. The hint pauses the whole
// destination (a message of another stream claimed beside it is held as
// well, which relay's pause tests cover); a message for another
// destination is not held up.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	forEachBackend(t, retryAfter)
}

func retryAfter(t *testing.T, b backend) {
	e := newEnv(t, b)
	h := e.newHook()
	m, bystander := stream("orders", 1)[0], stream("other", 1)[0]
	bystander.Destination = "other-hooks"
	e.enqueue(m, bystander)
	h.onPayload("orders-0", failing(1, reply{status: 429, retryAfter: "30", body: "slow down"}))
	rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{
		dest:          {Transport: h.transport("relay-1", false)}, // the default in-process retry and 30 s timeout
		"other-hooks": {Transport: h.transport("relay-1", false)},
	}})
	e.waitFor("the 429 and the bystander", func() bool { return h.count("orders-0") == 1 && e.gone(bystander) })
	e.settle()

	due := epoch.Add(30 * time.Second)
	got := e.get(m.ID)
	if got == nil || got.Attempts != 0 || !got.ScheduledFor.Equal(due) || got.InstanceID != "" ||
		!strings.Contains(got.Error, "429") || !got.DeadLetteredAt.IsZero() {
		t.Fatalf("after the 429 the message is %+v; want it due at %v, no attempt charged", got, due)
	}
	// A 30 s hint does not fit in the attempt's 30 s timeout: no in-process
	// retry, the message goes back to the store.
	if s := rn.r.Stats(); s.Released != 1 || s.Failed != 0 || s.Retries != 0 || s.Delivered != 1 {
		t.Fatalf("stats = %+v, want the message released once and the bystander delivered", s)
	}

	mark := rn.hs.startedCalls()
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 29 * time.Second, 30*time.Second - time.Millisecond} {
		e.advance(epoch.Add(at).Sub(e.clk.Now()))
		e.settle()
		if n := h.count("orders-0"); n != 1 {
			t.Fatalf("at +%v the message was sent again (%d requests), before its Retry-After", at, n)
		}
	}
	for _, c := range rn.hs.callsSince(mark) {
		if len(c.claimed) > 0 {
			t.Fatalf("at %v the relay claimed %v before the Retry-After passed", c.at.Sub(epoch), c.claimed)
		}
	}

	e.advance(time.Millisecond)
	e.waitFor("the delivery at +30s", func() bool { return e.gone(m) })
	e.settle()
	var answers []int
	for _, rq := range h.requests() {
		if rq.payload != "orders-0" {
			continue
		}
		answers = append(answers, rq.status)
		if attempt(rq) != 1 {
			t.Errorf("request at +%v sent as attempt %q: a 429 must not charge an attempt", rq.at.Sub(epoch), rq.attempt)
		}
		if rq.status == 200 && !rq.at.Equal(due) {
			t.Errorf("re-sent at +%v, want +30s", rq.at.Sub(epoch))
		}
	}
	if !slices.Equal(answers, []int{429, 200}) {
		t.Fatalf("answers = %v, want 429 then 200", answers)
	}
	if s := rn.r.Stats(); s.Delivered != 2 || s.Released != 1 || s.Failed != 0 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}
}
