package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// ManyNamedDestinations measures a claim that names many destinations,
// most of them idle, as a relay of many destinations makes each claim
// (ClaimRequest.Destinations). It enqueues on s, an empty store, messages
// for five of 1,000 destinations and for one it never names, then claims
// naming the five and naming all 1,000, each call completing the last,
// and returns the median call of each. It fails tb if a claim gets
// nothing or takes a message of a destination it did not name.
//
// The claim read every destination it was named, even those holding
// nothing: 10 to 60 times the claim naming the busy five, by store. It now
// reads those with work (docs/claim.md). The stores' benchmarks report the
// ratio; a timed assertion would be noise on a shared machine.
func ManyNamedDestinations(tb testing.TB, s store.Store) (busy, wide time.Duration) {
	tb.Helper()
	ctx := context.Background()
	var msgs []*outbox.Message
	for i := range 300 {
		// d0000..d0004 are busy; "other" has work but is not asked for.
		dest := fmt.Sprintf("d%04d", i%5)
		if i%6 == 5 {
			dest = "other"
		}
		msgs = append(msgs, &outbox.Message{Destination: dest, Stream: fmt.Sprintf("s%d", i%40), Type: "t", Payload: []byte(`{}`)})
	}
	if err := s.Enqueue(ctx, msgs...); err != nil {
		tb.Fatal(err)
	}
	all := make([]string, 1000)
	caps := map[string]int{}
	for i := range all {
		all[i] = fmt.Sprintf("d%04d", i)
		caps[all[i]] = 16
	}
	claim := func(req store.ClaimRequest, calls int) time.Duration {
		var done []store.Completion
		var took []time.Duration
		for range calls {
			t0 := time.Now()
			res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Completions: done, Claim: req})
			took = append(took, time.Since(t0))
			if err != nil {
				tb.Fatal(err)
			}
			if len(res.Claimed) == 0 {
				tb.Fatalf("claim of %d destinations got nothing", len(req.Destinations))
			}
			done = done[:0]
			for _, m := range res.Claimed {
				if !slices.Contains(req.Destinations, m.Destination) {
					tb.Fatalf("claimed a message of %q, not asked for", m.Destination)
				}
				done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
			}
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	narrow := store.ClaimRequest{Limit: 8, Destinations: all[:5], PerDestination: caps}
	every := store.ClaimRequest{Limit: 8, Destinations: all, PerDestination: caps}
	claim(narrow, 2) // warm the statement cache
	claim(every, 1)
	return claim(narrow, 5), claim(every, 5)
}
