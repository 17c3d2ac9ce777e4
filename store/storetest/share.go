package storetest

import (
	"fmt"
	"testing"

	"github.com/backstophq/backstop/store"
)

// testReadyStreamsShareAClaim: the ready streams share a claim. Four deep
// streams and a claim of 64 give 16 each, not the first stream's 64 (a
// relay that sends a strict stream's messages one at a time would have
// one stream in flight); a stream alone gives the whole claim.
func testReadyStreamsShareAClaim(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict
	streams := make([]string, 4)
	for i := range streams {
		streams[i] = fmt.Sprintf("s%d", i)
		e.enqueue(msgs(40, "d", streams[i])...)
	}
	r := e.batch("a", store.Batch{Claim: store.ClaimRequest{Limit: 64}})
	eq(t, "claimed", len(r.Claimed), 64)
	per := map[string]int{}
	for _, m := range r.Claimed {
		per[m.Stream]++
	}
	for _, s := range streams {
		eq(t, "claimed of stream "+s, per[s], 16)
	}

	alone := newEnv(t, h)
	deep := alone.enqueue(msgs(80, "d", "deep")...)
	alone.claimExactly("a", 64, deep[:64]...)
}
