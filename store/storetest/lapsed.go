package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// Cases of a strict stream whose head an operator dead-lettered while a
// relay delivered it, and whose lease then lapsed: the row keeps the
// relay's instance and an expired lease, the stream is blocked for good,
// and only an operator frees it.

// handDeadLetteredLapsed enqueues three messages on d/s (strict), has a
// relay claim the first, dead-letters it by hand while it is leased (or,
// when late, once its lease lapsed and before anything claimed it again),
// lets the lease lapse and, when claimAfter, claims once after the lapse,
// which finds nothing: the dead letter holds the stream.
func handDeadLetteredLapsed(t *testing.T, e *env, claimAfter, late bool) []*outbox.Message {
	t.Helper()
	m := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("relay", 1, m[0])
	if !late {
		noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[0].ID, "looks stuck"))
		e.claimExactly("other", 10) // the relay still delivers m[0]
	}
	e.clk.Advance(31 * time.Second)
	if late {
		noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[0].ID, "looks stuck"))
	}
	if claimAfter {
		e.claimExactly("other", 10) // the dead letter holds the stream
	}
	eq(t, "lease holder after the lapse", e.get(m[0].ID).InstanceID, "relay")
	return m
}

// testLapsedDeadLetterFreedByOperator: once an operator releases the
// stream, replays the entry or deletes it, the stream is claimed again in
// order, although the dead-lettered row still carries the lapsed lease of
// the relay that was delivering it (whether it was dead-lettered while
// leased or once the lease lapsed, before a claim took it again). Before,
// ReleaseStream changed nothing a stream waits for on a row that kept an
// instance, so a stream a claim had found blocked after the lapse was
// never looked at again and its later messages were never claimed.
func testLapsedDeadLetterFreedByOperator(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name       string
		claimAfter bool
		late       bool // dead-lettered after the lapse
		free       func(t *testing.T, e *env, m []*outbox.Message)
		want       []int // m's indexes the next claim takes, in order
	}{
		{"ReleaseStream", true, false, releaseOne, []int{1, 2}},
		{"ReleaseStream before any claim saw the lapse", false, false, releaseOne, []int{1, 2}},
		{"ReleaseStream of a message dead-lettered after its lease lapsed", true, true, releaseOne, []int{1, 2}},
		{"Replay", true, false, func(t *testing.T, e *env, m []*outbox.Message) {
			noErr(t, "Replay", e.s.DLQ().Replay(e.ctx, onlyEntry(t, e, nil).ID))
		}, []int{0, 1, 2}},
		{"ReplayMatching", true, false, func(t *testing.T, e *env, m []*outbox.Message) {
			done, err := e.s.DLQ().ReplayMatching(e.ctx, nil, false)
			noErr(t, "ReplayMatching", err)
			eq(t, "replayed", len(done), 1)
		}, []int{0, 1, 2}},
		{"Delete", true, false, func(t *testing.T, e *env, m []*outbox.Message) {
			noErr(t, "Delete", e.s.DLQ().Delete(e.ctx, onlyEntry(t, e, nil).ID))
			e.mustBeGone(m[0].ID)
		}, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h)
			m := handDeadLetteredLapsed(t, e, tc.claimAfter, tc.late)
			tc.free(t, e, m)
			// one at a time: the stream's next message first
			first := m[tc.want[0]]
			e.claimExactly("other", 1, first)
			e.complete("other", outbox.StatusPublished, first.ID)
			var rest []*outbox.Message
			for _, i := range tc.want[1:] {
				rest = append(rest, m[i])
			}
			e.claimExactly("other", 10, rest...)
		})
	}
}

func releaseOne(t *testing.T, e *env, m []*outbox.Message) {
	t.Helper()
	n, err := e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	eq(t, "released", n, 1)
}

// testLapsedDeadLetterKeepsHoldingStream: without an operator freeing it,
// a dead letter whose delivery's lease lapsed holds its strict stream
// however much time passes, and neither RetryNow nor ResetAttempts of it
// (which do not revive a dead letter) lets the later messages go.
func testLapsedDeadLetterKeepsHoldingStream(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := handDeadLetteredLapsed(t, e, true, false)
	e.clk.Advance(time.Hour)
	e.claimExactly("other", 10)
	noErr(t, "RetryNow", e.s.RetryNow(e.ctx, m[0].ID))
	e.claimExactly("other", 10)
	noErr(t, "ResetAttempts", e.s.ResetAttempts(e.ctx, m[0].ID))
	e.claimExactly("other", 10)
	if e.get(m[0].ID).DeadLetteredAt.IsZero() {
		t.Fatal("the message is no longer dead-lettered")
	}
	eq(t, "entries", depth(t, e), 1)
}
