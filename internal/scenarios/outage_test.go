package scenarios

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
)

// outageMode is how the webhook is down.
type outageMode string

const (
	refused     outageMode = "connection refused" // nothing listens
	unavailable outageMode = "503"                // it answers 503
	hangUp      outageMode = "hang-up"            // it closes the connection unanswered
)

// errorText is what the last error of a message tried during the outage
// says.
func (m outageMode) errorText() string {
	switch m {
	case refused:
		return "connection refused"
	case unavailable:
		return "503 Service Unavailable"
	}
	return "EOF"
}

// TestLongOutage: the webhook is down for an hour of fake time while 40
// messages in 8 strictly ordered streams wait. The breaker opens after 3
// failures; from then on the webhook sees nothing but probes, 1 s after
// the opening, then 2 s, 4 s, ... apart up to MaxProbeInterval (five
// minutes here); no message is charged an attempt or dead-lettered. When the
// webhook recovers, the next probe closes the breaker and every message
// is delivered exactly once, in stream order, within 5 s.
func TestLongOutage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []outageMode{refused, unavailable, hangUp} {
			t.Run(string(mode), func(t *testing.T) {
				t.Parallel()
				longOutage(t, b, mode)
			})
		}
	})
}

func longOutage(t *testing.T, b backend, mode outageMode) {
	const (
		streams, perStream = 8, 5
		workers            = 4
		maxFailures        = 3
		openFor            = 5 * time.Minute
		outage             = time.Hour
	)
	e := newEnv(t, b)
	h := e.newHook()
	var all [][]*outbox.Message
	for i := range streams {
		all = append(all, stream(fmt.Sprintf("s%d", i), perStream))
	}
	msgs := interleave(all...)
	e.enqueue(msgs...)

	// tries counts what reached for the webhook: dials when it refuses
	// connections, requests otherwise.
	tries := func() int { return len(h.requests()) }
	switch mode {
	case refused:
		h.down()
		tries = func() int { return int(h.dials.Load()) }
	case unavailable:
		h.setPhase(always(reply{status: http.StatusServiceUnavailable, body: "down for maintenance"}))
	case hangUp:
		h.setPhase(always(reply{hangUp: true}))
	}
	rn := e.start("relay-1", relay.Config{
		Destinations: map[string]relay.Destination{dest: {
			Transport: h.transport("relay-1", true),
			InProcess: retry.NewConfig(1, nil), // one request per attempt, to count probes exactly
			Breaker:   &circuitbreaker.Config{MaxFailures: maxFailures, Timeout: openFor},
			// Probes back off to one per five minutes, to keep an hour
			// short to walk through.
			MaxProbeInterval: openFor,
		}},
		Workers: workers,
	})
	br := rn.r.Breaker(dest)
	e.waitFor("the breaker to open", func() bool { return br.State() == circuitbreaker.StateOpen })
	e.settle()
	n := tries()
	// Deliveries already past the breaker when it opened still fail.
	if n < maxFailures || n > maxFailures+workers-1 {
		t.Fatalf("%d tries before the breaker opened, want %d to %d", n, maxFailures, maxFailures+workers-1)
	}

	// Probes come early and back off while the webhook stays down: the
	// first 1 s after the breaker opened, then 2 s, 4 s, ... up to the
	// breaker's Timeout, one try each and nothing in between.
	wait, elapsed, probes := time.Second, time.Duration(0), 0
	for elapsed < outage {
		e.advance(wait / 2)
		e.settle()
		if got := tries(); got != n || br.State() != circuitbreaker.StateOpen {
			t.Fatalf("probe %d, before it: %d tries (was %d), breaker %v", probes+1, got, n, br.State())
		}
		e.advance(wait - wait/2)
		mark := rn.hs.startedCalls()
		e.settle()
		if got := tries(); got != n+1 {
			t.Fatalf("probe %d after %v: %d tries, want one probe (%d); breaker %+v; stats %+v; calls %+v",
				probes+1, wait, got, n+1, br.GetStats(), rn.r.Stats(), rn.hs.callsSince(mark))
		}
		n++
		probes++
		if st := br.State(); st != circuitbreaker.StateOpen {
			t.Fatalf("probe %d: breaker %v after a failed probe", probes, st)
		}
		elapsed += wait
		wait = min(2*wait, openFor)
	}
	withError := 0
	for _, m := range msgs {
		got := e.get(m.ID)
		if got == nil || got.Attempts != 0 || !got.DeadLetteredAt.IsZero() || got.Status.Has(outbox.StatusFailed) {
			t.Fatalf("after the outage %s is %+v: want it waiting, no attempt charged", m.Payload, got)
		}
		if got.Error != "" {
			withError++
			if !strings.Contains(got.Error, mode.errorText()) {
				t.Fatalf("%s's last error %q does not say %q", m.Payload, got.Error, mode.errorText())
			}
		}
	}
	if withError == 0 {
		t.Fatal("no message records the outage's error")
	}
	if d := len(e.deadLetters()); d != 0 {
		t.Fatalf("an outage dead-lettered %d messages", d)
	}
	if mode == refused && len(h.requests()) != 0 {
		t.Fatalf("the webhook answered %d requests while refusing connections", len(h.requests()))
	}
	if s := rn.r.Stats(); s.Failed != 0 || s.DeadLettered != 0 || s.Delivered != 0 {
		t.Fatalf("stats after the outage = %+v", s)
	}

	// Recovery.
	if mode == refused {
		h.up()
	} else {
		h.setPhase(nil)
	}
	e.advance(wait)
	e.settle()
	if st := br.State(); st != circuitbreaker.StateClosed {
		t.Fatalf("breaker %v after a good probe", st)
	}
	// Everything goes within 5 s of the good probe.
	for i := 0; !e.gone(msgs...); i++ {
		if i == 5 {
			t.Fatalf("not delivered 5 s after recovery: %d delivered", len(h.delivered()))
		}
		e.advance(time.Second)
		e.settle()
	}

	got := h.delivered()
	for _, m := range msgs {
		if c := countOf(got, string(m.Payload)); c != 1 {
			t.Errorf("%s delivered %d times", m.Payload, c)
		}
	}
	for i, s := range all {
		var want []string
		for _, m := range s {
			want = append(want, string(m.Payload))
		}
		if order := streamOrder(got, fmt.Sprintf("s%d", i)); !slices.Equal(order, want) {
			t.Errorf("stream s%d delivered as %v", i, order)
		}
	}
	for _, rq := range h.requests() {
		if attempt(rq) != 1 {
			t.Fatalf("%s sent as attempt %q: an outage must not charge attempts", rq.payload, rq.attempt)
		}
	}
	trips := int64(1 + probes) // the first opening, then one per failed probe
	e.waitFor("the breaker's trips to be counted", func() bool {
		return rn.r.Stats().Destinations[dest].BreakerTrips == trips
	})
	s, bs := rn.r.Stats(), br.GetStats()
	if s.Delivered != int64(len(msgs)) || s.Failed != 0 || s.DeadLettered != 0 || bs.TotalFailures != int64(n-probes) { // probes pass the breaker by
		t.Fatalf("stats = %+v; breaker %+v", s, bs)
	}
	t.Logf("%s: %d tries in the hour, %d breaker trips, %d releases, %d rejections",
		mode, n, s.Destinations[dest].BreakerTrips, s.Released, s.Rejected)
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}
