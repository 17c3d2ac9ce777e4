package scenarios

import (
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
)

// TestRevokedCredentialHoldsMessages: the webhook starts refusing the
// relay's credential (401) after the first message. Nothing is wrong with
// the messages: each refusal gives the message back to the store with no
// attempt charged and nothing dead-lettered, and once the credential is
// accepted again every message is delivered.
func TestRevokedCredentialHoldsMessages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		h := e.newHook()
		first := stream("orders", 1)[0]
		e.enqueue(first)
		rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{dest: {
			Transport: h.transport("relay-1", false),
			InProcess: retry.NewConfig(1, nil),
		}}})
		e.waitFor("the first delivery", func() bool { return e.gone(first) })

		h.setPhase(always(reply{status: 401, body: "invalid API key"}))
		m := stream("refunds", 1)[0]
		e.enqueue(m)
		e.kick()
		for want := 1; want <= 2; want++ {
			e.waitFor("a 401", func() bool { return h.count("refunds-0") == want })
			e.settle()
			got := e.get(m.ID)
			if got == nil || got.Attempts != 0 || !got.DeadLetteredAt.IsZero() {
				t.Fatalf("after 401 #%d the message is %+v: want it waiting, not charged", want, got)
			}
			if !strings.Contains(got.Error, "401 Unauthorized") {
				t.Fatalf("after 401 #%d: error %q; want it naming the 401", want, got.Error)
			}
			e.advance(got.ScheduledFor.Sub(e.clk.Now()))
		}

		h.setPhase(nil) // the credential is fixed
		e.waitFor("delivery", func() bool { return e.gone(m) })
		e.settle()
		if got := statuses(h, "refunds-0"); !slices.Equal(got, []int{401, 401, 200}) {
			t.Fatalf("answers = %v, want 401, 401, 200", got)
		}
		if s := rn.r.Stats(); s.Delivered != 2 || s.DeadLettered != 0 || s.Released != 2 {
			t.Fatalf("stats = %+v, want 2 delivered after 2 releases, none dead-lettered", s)
		}
		if n := len(e.deadLetters()); n != 0 {
			t.Fatalf("%d dead letters", n)
		}
	})
}
