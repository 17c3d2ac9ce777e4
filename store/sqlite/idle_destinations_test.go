package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestClaimOverManyIdleDestinationsCostsWhatTheBusyOnesDo: a relay of
// 1,000 destinations, five of them busy, names them all in each claim
// (ClaimRequest.Destinations). The claim read every one of them, two
// queries each, and took about 40 times the claim naming the five (60
// times with 2,000). It now reads those with work, and still none it was
// not asked for.
func TestClaimOverManyIdleDestinationsCostsWhatTheBusyOnesDo(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
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
		t.Fatal(err)
	}
	all := make([]string, 1000)
	caps := map[string]int{}
	for i := range all {
		all[i] = fmt.Sprintf("d%04d", i)
		caps[all[i]] = 16
	}
	// claim makes calls claims of req, each completing the last, and
	// returns the median call.
	claim := func(req store.ClaimRequest, calls int) time.Duration {
		var done []store.Completion
		var took []time.Duration
		for range calls {
			t0 := time.Now()
			res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Completions: done, Claim: req})
			took = append(took, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Claimed) == 0 {
				t.Fatalf("claim of %d destinations got nothing", len(req.Destinations))
			}
			done = done[:0]
			for _, m := range res.Claimed {
				if !slices.Contains(req.Destinations, m.Destination) {
					t.Fatalf("claimed a message of %q, not asked for", m.Destination)
				}
				done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
			}
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	busy := store.ClaimRequest{Limit: 8, Destinations: all[:5], PerDestination: caps}
	wide := store.ClaimRequest{Limit: 8, Destinations: all, PerDestination: caps}
	claim(busy, 2) // warm the statement cache
	claim(wide, 1)
	base, got := claim(busy, 5), claim(wide, 5)
	t.Logf("claim naming 5 destinations: %v; naming 1,000: %v (%.1fx)", base, got, float64(got)/float64(base))
	if got > 4*base+5*time.Millisecond {
		t.Fatalf("a claim naming 1,000 destinations, 5 busy, took %v, %.0f times the claim naming the 5 (%v)",
			got, float64(got)/float64(base), base)
	}
}
