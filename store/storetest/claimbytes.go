package storetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The claim's byte budget (ClaimRequest.MaxBytes, FirstAnySize).
var claimBytesCases = []testCase{
	{"MaxBytesStopsTheClaimInSeqOrder", testMaxBytesPrefix},
	{"MaxBytesCutStreamStaysReady", testMaxBytesCutStreamReady},
	{"FirstAnySizeTakesOneLargeMessageAlone", testFirstAnySize},
	{"MaxBytesAcrossDestinationsAndStreams", testMaxBytesAcross},
	{"MaxBytesPassesOverWhatIsOverTheBudget", testMaxBytesPassesOver},
}

// headerSlack is what a test budget allows for each message's empty
// headers as a store keeps them (a few bytes of JSON or jsonb).
const headerSlack = 64

// sized is a message of stream with a payload of n bytes, named by tag.
func sized(dest, stream, tag string, n int) *outbox.Message {
	m := msg(dest, stream)
	m.Payload = append([]byte(tag+":"), bytes.Repeat([]byte("x"), n-len(tag)-1)...)
	return m
}

// budgetFor is a MaxBytes that holds messages of the payload sizes given,
// and no more than headerSlack besides for each.
func budgetFor(sizes ...int) int64 {
	var n int64
	for _, s := range sizes {
		n += store.ClaimedBytes(int64(s), 0) + headerSlack
	}
	return n
}

// claimBytes claims up to 100 messages within maxBytes as instance.
func (e *env) claimBytes(instance string, maxBytes int64, firstAny bool) []*outbox.Message {
	e.t.Helper()
	return e.batch(instance, store.Batch{Claim: store.ClaimRequest{Limit: 100, MaxBytes: maxBytes, FirstAnySize: firstAny}}).Claimed
}

// testMaxBytesPrefix: the claim takes messages in seq order while they fit
// and stops at the first that does not, though later ones would fit: what
// it takes is a prefix, of each stream and of the whole.
func testMaxBytesPrefix(t *testing.T, h Harness) {
	e := newEnv(t, h)
	u1 := sized("d", "", "u1", 1000)
	s1 := sized("d", "s", "s1", 1000)
	s2 := sized("d", "s", "s2", 3000)
	u2 := sized("d", "", "u2", 1000)
	s3 := sized("d", "s", "s3", 1000)
	e.enqueue(u1, s1, s2, u2, s3)
	sameIDs(t, "claimed within two messages' bytes", e.claimBytes("relay", budgetFor(1000, 1000, 1000), false), u1, s1)
	// s2 waits behind s1, in flight; u2 fits.
	sameIDs(t, "claimed next", e.claimBytes("relay", budgetFor(1000), false), u2)
	e.complete("relay", outbox.StatusPublished, s1.ID)
	sameIDs(t, "claimed with too little for s2", e.claimBytes("relay", budgetFor(1000), false))
	sameIDs(t, "claimed with too little for s2, the first of any size", e.claimBytes("relay", budgetFor(1000), true), s2)
	e.complete("relay", outbox.StatusPublished, s2.ID)
	sameIDs(t, "claimed without a bound", e.claimBytes("relay", 0, false), s3)
}

// testMaxBytesCutStreamReady: a stream the budget cut keeps the rest of
// its messages claimable, in order, once the first are settled.
func testMaxBytesCutStreamReady(t *testing.T, h Harness) {
	for _, mode := range []outbox.Ordering{outbox.OrderingStrict, outbox.OrderingRelease, outbox.OrderingNone} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, h, withOrdering(mode))
			var ms []*outbox.Message
			for i := range 5 {
				ms = append(ms, sized("d", "s", fmt.Sprintf("m%d", i), 1000))
			}
			e.enqueue(ms...)
			sameIDs(t, "first claim", e.claimBytes("relay", budgetFor(1000, 1000), false), ms[:2]...)
			if mode == outbox.OrderingNone {
				sameIDs(t, "second claim, the first two in flight", e.claimBytes("relay", budgetFor(1000, 1000), false), ms[2:4]...)
				e.complete("relay", outbox.StatusPublished, ms[0].ID, ms[1].ID, ms[2].ID, ms[3].ID)
				e.claimExactly("relay", 100, ms[4])
				return
			}
			e.claimExactly("relay", 100) // held behind the two in flight
			e.complete("relay", outbox.StatusPublished, ms[0].ID, ms[1].ID)
			e.claimExactly("relay", 100, ms[2:]...)
		})
	}
}

// testFirstAnySize: a message larger than MaxBytes is claimed only as the
// claim's first, with FirstAnySize, and then alone.
func testFirstAnySize(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	big := sized("d", "", "big", 64<<10)
	small := sized("d", "", "small", 100)
	e.enqueue(big, small)
	sameIDs(t, "claimed with 1 byte and no first of any size", e.claimBytes("relay", 1, false))
	sameIDs(t, "claimed with 1 byte, the first of any size", e.claimBytes("relay", 1, true), big)
	sameIDs(t, "claimed next", e.claimBytes("relay", 1, true), small)
}

// testMaxBytesAcross: the budget counts every destination's and stream's
// messages of one claim together, in seq order, beside the caps.
func testMaxBytesAcross(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var all []*outbox.Message
	for i := range 12 {
		stream := fmt.Sprintf("s%d", i%4)
		if i%3 == 1 {
			stream = "" // d1's are unordered: its cap takes the lowest seq
		}
		all = append(all, sized(fmt.Sprintf("d%d", i%3), stream, fmt.Sprintf("m%d", i), 500))
	}
	e.enqueue(all...)
	res := e.batch("relay", store.Batch{Claim: store.ClaimRequest{Limit: 100, MaxBytes: budgetFor(500, 500, 500, 500, 500),
		PerDestination: map[string]int{"d1": 1}}})
	// d1 holds m1, m4, m7, m10: only m1 is within its cap.
	want := []*outbox.Message{all[0], all[1], all[2], all[3], all[5]}
	sameIDs(t, "claimed", res.Claimed, want...)
}

// testMaxBytesPassesOver: without FirstAnySize (the relay holds a message
// larger than its budget), a message larger than MaxBytes is passed over,
// with the later messages of its stream, and the claim takes the others
// of every stream and destination. It used to stop there: nothing after
// it in seq order was claimed until the held message was done.
func testMaxBytesPassesOver(t *testing.T, h Harness) {
	for _, mode := range []outbox.Ordering{outbox.OrderingStrict, outbox.OrderingRelease} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, h, withOrdering(mode))
			big1 := sized("d", "a", "big1", 8000)
			a2 := sized("d", "a", "a2", 100)
			u := sized("d", "", "u", 100)
			b1 := sized("d", "b", "b1", 100)
			big2 := sized("d", "", "big2", 8000)
			c1 := sized("d2", "c", "c1", 100)
			e.enqueue(big1, a2, u, b1, big2, c1)
			budget := budgetFor(100, 100, 100)
			sameIDs(t, "claimed past the large ones", e.claimBytes("relay", budget, false), u, b1, c1)
			sameIDs(t, "claimed with the first of any size", e.claimBytes("relay", budget, true), big1)
			e.complete("relay", outbox.StatusPublished, big1.ID)
			sameIDs(t, "claimed after the first large one", e.claimBytes("relay", budget, false), a2)
			sameIDs(t, "claimed last", e.claimBytes("relay", budget, true), big2)
		})
	}
}
