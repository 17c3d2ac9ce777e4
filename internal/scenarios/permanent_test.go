package scenarios

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
)

// TestPermanentFaultDeadLettersAtOnce: the webhook rejects one message
// with 400. It is dead-lettered after exactly one attempt with reason
// ValidationFailure and the response in its error text; the other
// messages are delivered; the later messages of its strictly ordered
// stream are held until an operator releases the stream or, once the
// webhook is fixed, replays the message.
func TestPermanentFaultDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		t.Run("then release the stream", func(t *testing.T) { permanentThenRelease(t, b) })
		t.Run("then replay the message", func(t *testing.T) { permanentThenReplay(t, b) })
	})
}

const rejection = `{"error":"invalid order: total is negative"}`

// permanent is the scenario up to the held stream.
type permanent struct {
	e      *env
	h      *hook
	rn     *runner
	orders []*outbox.Message // orders-1 is rejected
	entry  *dlq.Entry
}

func startPermanent(t *testing.T, b backend) *permanent {
	e := newEnv(t, b)
	h := e.newHook()
	orders, other := stream("orders", 4), stream("other", 2)
	e.enqueue(interleave(orders, other)...)
	h.onPayload("orders-1", always(reply{status: http.StatusBadRequest, body: rejection}))
	rn := e.start("relay-1", relay.Config{Destinations: map[string]relay.Destination{dest: {
		Transport: h.transport("relay-1", false), // the default in-process retry: 3 tries
	}}})
	e.waitFor("the good messages and the dead letter", func() bool {
		return e.gone(orders[0], other[0], other[1]) && len(e.deadLetters()) == 1
	})
	e.settle()
	p := &permanent{e: e, h: h, rn: rn, orders: orders, entry: e.deadLetters()[0]}

	if got := statuses(h, "orders-1"); !slices.Equal(got, []int{400}) {
		t.Fatalf("answers to the rejected message = %v, want one 400: a permanent fault is never retried", got)
	}
	en := p.entry
	if en.MessageID != orders[1].ID.String() || en.Reason != errorhandling.ReasonValidationFailure ||
		en.FailureReason != "ValidationFailure" || en.Attempts != 1 || en.Stream != "orders" || en.Status != dlq.StatusPending {
		t.Fatalf("dead letter = %+v", en)
	}
	for _, want := range []string{"400 Bad Request", "invalid order: total is negative"} {
		if !strings.Contains(en.ErrorMessage, want) {
			t.Fatalf("dead letter's error %q lacks %q", en.ErrorMessage, want)
		}
	}
	row := e.get(orders[1].ID)
	if row == nil || row.DeadLetteredAt.IsZero() || row.Attempts != 1 ||
		row.FailureReason != errorhandling.ReasonValidationFailure || row.Error != en.ErrorMessage {
		t.Fatalf("rejected message's row = %+v", row)
	}
	s := rn.r.Stats()
	if s.Delivered != 3 || s.Failed != 1 || s.DeadLettered != 1 || s.Retries != 0 {
		t.Fatalf("stats = %+v, want 3 delivered, 1 dead-lettered, no retries", s)
	}

	// Strict ordering: orders-2 and orders-3 wait behind the dead letter,
	// however long.
	for range 12 {
		e.advance(10 * time.Minute)
		e.settle()
	}
	for _, m := range orders[2:] {
		if n := h.count(string(m.Payload)); n != 0 {
			t.Fatalf("%s sent %d times past a dead-lettered message of its strict stream", m.Payload, n)
		}
		if got := e.get(m.ID); got == nil || got.Attempts != 0 {
			t.Fatalf("held message %s = %+v", m.Payload, got)
		}
	}
	st, err := e.s.StreamStatus(e.ctx, dest, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Blocked || st.Head == nil || st.Head.ID != orders[1].ID || !strings.Contains(st.Why, "dead-lettered") {
		t.Fatalf("stream status = blocked %v, why %q", st.Blocked, st.Why)
	}
	return p
}

// permanentThenRelease: releasing the stream lets the held messages go,
// in order; replaying the dead letter once the webhook accepts it
// delivers it too.
func permanentThenRelease(t *testing.T, b backend) {
	p := startPermanent(t, b)
	e, h := p.e, p.h
	n, err := e.s.ReleaseStream(e.ctx, dest, "orders")
	if err != nil || n != 1 {
		t.Fatalf("ReleaseStream = %d, %v; want 1 message released", n, err)
	}
	e.waitFor("the held messages", func() bool { return e.gone(p.orders[2:]...) })
	e.settle()
	if got := streamOrder(h.delivered(), "orders"); !slices.Equal(got, []string{"orders-0", "orders-2", "orders-3"}) {
		t.Fatalf("orders delivered as %v", got)
	}
	if e.get(p.orders[1].ID) == nil {
		t.Fatal("releasing the stream dropped the dead-lettered message")
	}

	h.onPayload("orders-1", nil) // fixed: 200 from now on
	if err := e.s.DLQ().Replay(e.ctx, p.entry.ID); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the replayed message", func() bool { return e.gone(p.orders[1]) })
	e.settle()
	if got := statuses(h, "orders-1"); !slices.Equal(got, []int{400, 200}) {
		t.Fatalf("answers to the replayed message = %v", got)
	}
	assertReplayed(t, p)
}

// permanentThenReplay: replaying the dead letter once the webhook
// accepts it delivers it, and the stream goes on behind it, in order.
func permanentThenReplay(t *testing.T, b backend) {
	p := startPermanent(t, b)
	e, h := p.e, p.h
	h.onPayload("orders-1", nil)
	if err := e.s.DLQ().Replay(e.ctx, p.entry.ID); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the stream", func() bool { return e.gone(p.orders...) })
	e.settle()
	want := []string{"orders-0", "orders-1", "orders-2", "orders-3"}
	if got := streamOrder(h.delivered(), "orders"); !slices.Equal(got, want) {
		t.Fatalf("orders delivered as %v, want %v", got, want)
	}
	assertReplayed(t, p)
}

func assertReplayed(t *testing.T, p *permanent) {
	t.Helper()
	en, err := p.e.s.DLQ().Get(p.e.ctx, p.entry.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !en.Replayed {
		t.Fatalf("entry after replay = %+v", en)
	}
	for _, rq := range p.h.requests() {
		if rq.payload == "orders-1" && rq.status == http.StatusOK && attempt(rq) != 1 {
			t.Fatalf("replayed message sent as attempt %q: a replay starts its attempts over", rq.attempt)
		}
	}
	if s := p.rn.r.Stats(); s.Delivered != 6 || s.DeadLettered != 1 {
		t.Fatalf("stats = %+v, want all 6 delivered", s)
	}
}

// streamOrder returns the payloads of stream s, in the order given.
func streamOrder(payloads []string, s string) []string {
	var out []string
	for _, p := range payloads {
		if strings.HasPrefix(p, s+"-") {
			out = append(out, p)
		}
	}
	return out
}
