package scenarios

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
)

// takeover is how a second relay comes to deliver what a dead one held.
type takeover struct {
	name            string
	lease           time.Duration // the store's LeaseDuration
	instanceTimeout time.Duration // the store's InstanceTimeout
	at              time.Duration // after the kill, the first moment B may claim
	declaredDead    bool          // B's claim declares A dead
}

var takeovers = []takeover{
	// A silent instance is declared dead once its last heartbeat is more
	// than InstanceTimeout old, and its leases are cleared at once.
	{name: "instance declared dead", lease: 10 * time.Minute, instanceTimeout: time.Minute,
		at: time.Minute + time.Millisecond, declaredDead: true},
	// A lease is free again the moment it expires.
	{name: "leases expire", lease: 30 * time.Second, instanceTimeout: 10 * time.Minute, at: 30 * time.Second},
}

// TestRelayKilledMidBatch: relay A claims a batch of 30 messages in 6
// strictly ordered streams and is killed while its 4 workers are each in
// the middle of a webhook request: from then on none of its store calls
// reaches the database (it records nothing, stops heart-beating, and its
// leases stay behind), although the webhook did process the 4 requests.
// Relay B, another instance on the same database, claims nothing while
// A's leases hold, then takes everything over: every message is delivered
// at least once, only the 4 that A had in flight twice, each stream in
// order, no attempt charged and nothing dead-lettered.
func TestRelayKilledMidBatch(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tk := range takeovers {
			t.Run(tk.name, func(t *testing.T) {
				t.Parallel()
				killedMidBatch(t, b, tk)
			})
		}
	})
}

func killedMidBatch(t *testing.T, b backend, tk takeover) {
	const streams, perStream, workers = 6, 5, 4
	e := newEnv(t, b, func(c *store.Config) { c.LeaseDuration, c.InstanceTimeout = tk.lease, tk.instanceTimeout })
	h := e.newHook()
	var all [][]*outbox.Message
	for i := range streams {
		all = append(all, stream(fmt.Sprintf("s%d", i), perStream))
	}
	msgs := interleave(all...)
	e.enqueue(msgs...)

	// A's requests reach the webhook, which acts on them but answers only
	// once A is dead.
	answer := make(chan struct{})
	h.onRelay("relay-a", always(reply{hold: answer}))
	a := e.start("relay-a", relay.Config{
		Destinations: map[string]relay.Destination{dest: {Transport: h.transport("relay-a", false)}},
		Workers:      workers, BatchSize: len(msgs),
	})
	e.waitFor("A's workers to be mid-request", func() bool { return len(h.requests()) == workers })
	if n := a.hs.holding(); n != len(msgs) {
		t.Fatalf("A holds %d messages, want the whole batch of %d", n, len(msgs))
	}
	inFlight := map[string]bool{}
	for _, rq := range h.requests() {
		inFlight[rq.payload] = true
	}

	// The kill: A's store calls fail from now on. Its shutdown starts no
	// new delivery; once it has begun (its first call giving messages
	// back, which fails), the webhook answers A's requests.
	a.hs.kill()
	h.onRelay("relay-a", always(reply{status: http.StatusServiceUnavailable})) // anything A might still send
	a.cancel()
	e.waitFor("A to begin shutting down", func() bool {
		for _, c := range a.hs.callsSince(0) {
			if c.err != nil && c.gave > 0 {
				return true
			}
		}
		return false
	})
	close(answer)
	if err := a.stop(); err == nil {
		t.Fatal("A's Run returned nil: it recorded its outcomes although its store calls failed")
	}
	if n := len(h.requests()); n != workers {
		t.Fatalf("A sent %d requests, want only the %d in flight when it was killed", n, workers)
	}
	for _, m := range msgs {
		got := e.get(m.ID)
		if got == nil || got.InstanceID != "relay-a" || !got.LeaseExpiry.Equal(epoch.Add(tk.lease)) || got.Attempts != 0 {
			t.Fatalf("after the kill %s is %+v: want it still leased to relay-a", m.Payload, got)
		}
	}

	// B takes over, no earlier than A's leases allow.
	bRun := e.start("relay-b", relay.Config{
		Destinations: map[string]relay.Destination{dest: {Transport: h.transport("relay-b", false)}},
		Workers:      workers,
	})
	e.settle()
	e.advance(tk.at - time.Millisecond)
	e.settle()
	for _, c := range bRun.hs.callsSince(0) {
		if len(c.claimed) > 0 || c.dead > 0 {
			t.Fatalf("B claimed %d messages and declared %d instances dead at +%v, before A's leases lapsed",
				len(c.claimed), c.dead, c.at.Sub(epoch))
		}
	}
	e.advance(time.Millisecond)
	e.waitFor("B to deliver everything", func() bool { return e.gone(msgs...) })
	e.settle()

	var took *call
	dead := 0
	for _, c := range bRun.hs.callsSince(0) {
		dead += c.dead
		if took == nil && (len(c.claimed) > 0 || c.dead > 0) {
			took = &c
		}
	}
	switch {
	case took == nil || took.end.Before(epoch.Add(tk.at)):
		t.Fatalf("B's first claim: %+v, want one at +%v", took, tk.at)
	case tk.declaredDead && (took.dead != 1 || dead != 1):
		t.Fatalf("B's first claim declared %d instances dead (%d in all), want A", took.dead, dead)
	case !tk.declaredDead && dead != 0:
		t.Fatalf("B declared %d instances dead within A's instance timeout", dead)
	}
	byB := map[string]int{}
	for _, rq := range h.requests() {
		if rq.relay == "relay-b" {
			byB[rq.payload]++
		}
		if attempt(rq) != 1 {
			t.Errorf("%s sent by %s as attempt %q: a crash must not charge attempts", rq.payload, rq.relay, rq.attempt)
		}
	}
	got := h.delivered()
	for _, m := range msgs {
		p := string(m.Payload)
		want := 1
		if inFlight[p] {
			want = 2 // A's delivery went through but was never recorded
		}
		if n := countOf(got, p); n != want || byB[p] != 1 {
			t.Errorf("%s delivered %d times (%d by B), want %d", p, n, byB[p], want)
		}
	}
	for i := range all {
		assertStreamOrder(t, got, fmt.Sprintf("s%d", i))
	}
	if n := len(e.deadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	if s := bRun.r.Stats(); s.Delivered != int64(len(msgs)) || s.Failed != 0 || s.DeadLettered != 0 {
		t.Fatalf("B's stats = %+v", s)
	}
}

// assertStreamOrder checks that the deliveries of stream s, duplicates
// included, never go back: "s-0 s-0 s-1 s-2" is in order, "s-1 s-0" not.
func assertStreamOrder(t *testing.T, delivered []string, s string) {
	t.Helper()
	last := -1
	for _, p := range streamOrder(delivered, s) {
		var n int
		if _, err := fmt.Sscanf(p[len(s)+1:], "%d", &n); err != nil {
			t.Fatalf("payload %q: %v", p, err)
		}
		if n < last {
			t.Errorf("stream %s delivered as %v: out of order", s, streamOrder(delivered, s))
			return
		}
		last = n
	}
}
