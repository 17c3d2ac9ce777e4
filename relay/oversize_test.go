package relay

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// Rows larger than any message may carry (headers of 9 MB; the store's
// tests cover payloads over 64 MiB), written by plain SQL between good
// messages: each is claimed alone, unread, and quarantined, and the
// relay claims what is behind them at once. Before, a round whose claim
// only quarantined looked empty, and the relay waited a poll interval,
// doubled each time, after each (twelve rows of 100 MiB took 56 s). The
// fake clock never moves here and nothing wakes the relay but its own
// rounds and its recorder: it must get through on its own.
func TestOversizeRowsAreQuarantinedWithoutWaitingForPolls(t *testing.T) {
	e := newEnv(t)
	first := msg("d", "", 1)
	e.enqueue(first)
	table := e.s.Config().TablePrefix + "outbox"
	for _, q := range []string{
		`INSERT INTO ` + table + ` (destination, type, headers) VALUES ('d', 'test.event', '{"x-big":"' || hex(zeroblob(4400000)) || '"}')`,
		`INSERT INTO ` + table + ` (destination, type, headers) VALUES ('d', 'test.event', '{"x-big":"' || hex(zeroblob(4500000)) || '"}')`,
		`INSERT INTO ` + table + ` (destination, type, headers) VALUES ('d', 'test.event', '{"x-big":"' || hex(zeroblob(4600000)) || '"}')`,
	} {
		if _, err := e.s.DB().ExecContext(e.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	last := msg("d", "", 2)
	e.enqueue(last)
	rec := &recorder{}
	cfg := e.config(map[string]Destination{"d": {Transport: rec.transport()}})
	cfg.PrefetchBytes = 1 << 20
	rn := e.start(cfg)
	for rn.r.Stats().DeadLettered < 3 || len(rec.got()) < 2 {
		ctx, cancel := context.WithTimeout(e.ctx, waitNet)
		before := rn.r.rounds.Load()
		err := rn.r.turned.wait(ctx, before)
		cancel()
		if err != nil {
			t.Fatalf("the relay stopped short: %v (stats %+v, delivered %v)", err, rn.r.Stats(), rec.got())
		}
	}
	got := rec.got()
	if len(got) != 2 || got[0] != string(first.Payload) || got[1] != string(last.Payload) {
		t.Fatalf("delivered %q, want the two good messages", got)
	}
	if n := len(e.deadLetters()); n != 3 {
		t.Fatalf("dead letters %d, want the 3 rows of oversize headers", n)
	}
}

// A message larger than what PrefetchBytes has left, while a slow
// destination keeps a delivery in flight: it is claimed all the same, the
// first of its claim, and so are the messages behind it. Had it to wait
// until the relay held nothing, the claims would stop before it, for every
// destination, for as long as the slow delivery lasts.
func TestLargeMessageIsClaimedBesideASlowDelivery(t *testing.T) {
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	const budget = 1 << 20
	slow := msg("slow", "", 1)
	slow.Payload = append(slow.Payload, make([]byte, 600<<10)...)
	e.enqueue(slow)
	hang, started, proceed := firstHangs()
	fast := &recorder{}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: hang.transport(), Timeout: time.Hour},
		"fast": {Transport: fast.transport()},
	})
	cfg.PrefetchBytes = budget
	rn := e.start(cfg)
	<-started
	big := msg("fast", "", 1)
	big.Payload = append(big.Payload, make([]byte, 700<<10)...)
	e.enqueue(big)
	var after []*outbox.Message
	for i := range 5 {
		m := msg("fast", "", 10+i)
		after = append(after, m)
		e.enqueue(m)
	}
	rn.waitFor("the large message and those behind it", func() bool { return len(fast.got()) == 1+len(after) })
	close(proceed)
	rn.settle()
	if n := len(hang.got()); n != 1 {
		t.Fatalf("the slow message delivered %d times", n)
	}
}

// A message larger than PrefetchBytes by itself, in flight to a slow
// destination: the relay goes on claiming the other messages within the
// budget and delivering them, and claims a second message larger than the
// budget only once the first is done, while the messages after the second
// are claimed past it. Before, holding the first put the relay past its
// budget, and it claimed nothing for any destination for as long as the
// slow delivery lasted; then the second held back every claim after it in
// seq order for as long.
func TestMessageLargerThanTheBudgetDoesNotStopTheOthers(t *testing.T) {
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	const budget = 512 << 10
	big := msg("slow", "", 1)
	big.Payload = append(big.Payload, make([]byte, 700<<10)...)
	e.enqueue(big)
	hang, started, proceed := firstHangs()
	var big2 *outbox.Message
	early := make(chan string, 1)
	fast := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		select {
		case <-proceed:
		default:
			if big2 != nil && m.ID == big2.ID {
				early <- "the second large message was delivered while the first was in flight"
			}
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: hang.transport(), Timeout: time.Hour},
		"fast": {Transport: fast.transport()},
	})
	cfg.PrefetchBytes = budget
	rn := e.start(cfg)
	<-started
	// 1 MiB in all, twice the budget: they come in claims within it.
	for i := range 20 {
		m := msg("fast", "", 10+i)
		m.Payload = append(m.Payload, make([]byte, 50<<10)...)
		e.enqueue(m)
	}
	rn.waitFor("the small messages beside the large one in flight", func() bool { return len(fast.got()) == 20 })

	big2 = msg("fast", "", 100)
	big2.Payload = append(big2.Payload, make([]byte, 600<<10)...)
	e.enqueue(big2)
	// Small ones after it in seq order are claimed past it: they waited
	// for the first large message's delivery.
	for i := range 5 {
		e.enqueue(msg("fast", "", 200+i))
	}
	rn.waitStill("delivery of the small messages after the second large one", "the second large message holds them back", func() bool {
		return len(fast.got()) == 25
	})
	rn.r.fl.mu.Lock()
	_, held := rn.r.fl.m[big2.ID]
	rn.r.fl.mu.Unlock()
	if held || len(fast.got()) != 25 {
		t.Fatalf("the second large message was claimed while the first was in flight (held %v, delivered %d)", held, len(fast.got()))
	}
	close(proceed)
	rn.waitFor("the second large message", func() bool { return len(fast.got()) == 26 })
	rn.settle()
	select {
	case s := <-early:
		t.Fatal(s)
	default:
	}
	if n := len(hang.got()); n != 1 {
		t.Fatalf("the slow message delivered %d times", n)
	}
}
