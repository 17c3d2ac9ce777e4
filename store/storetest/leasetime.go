package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// leaseTimeCases pin down Result.Now: the store's clock when the batch
// ran, from which the claim's and the renewals' expiries are computed, so
// that a caller can tell how long a lease the store granted whatever its
// own clock reads.
var leaseTimeCases = []testCase{
	{"NowIsTheStoreClockOfTheExpiries", func(t *testing.T, h Harness) { testLeaseTime(t, h, false) }},
	{"NowIsTheDatabaseClockOfTheExpiries", func(t *testing.T, h Harness) { testLeaseTime(t, h, true) }},
}

// leaseTimeTolerance is how far Expiry − Now may be from the lease: the
// stores keep times to the millisecond or finer.
const leaseTimeTolerance = time.Millisecond

// testLeaseTime claims with one lease and renews with another, on the
// suite's fake clock or (dbClock) on the store's own clock (Config.Clock
// nil), and checks that each expiry is Result.Now plus the lease asked
// for.
func testLeaseTime(t *testing.T, h Harness, dbClock bool) {
	var opts []option
	if dbClock {
		opts = append(opts, func(c *store.Config) { c.Clock = nil })
	}
	e := newEnv(t, h, opts...)
	m := e.enqueue(msg("d", ""))[0]
	res := e.batch("a", store.Batch{Claim: store.ClaimRequest{Limit: 1, Lease: 45 * time.Second}})
	if res.Now.IsZero() {
		t.Fatal("Result.Now of a claim is zero")
	}
	if !dbClock {
		timeEq(t, "Result.Now of the claim", res.Now, epoch)
	}
	sameIDs(t, "claimed", res.Claimed, m)
	leaseNear(t, "claim: LeaseExpiry − Now", res.Claimed[0].LeaseExpiry.Sub(res.Now), 45*time.Second)

	if !dbClock {
		e.clk.Advance(10 * time.Second)
	}
	res = e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}, Claim: store.ClaimRequest{Lease: time.Minute}})
	if res.Now.IsZero() {
		t.Fatal("Result.Now of a renewal is zero")
	}
	if !dbClock {
		timeEq(t, "Result.Now of the renewal", res.Now, epoch.Add(10*time.Second))
	}
	eq(t, "len(Renewed)", len(res.Renewed), 1)
	leaseNear(t, "renewal: Expiry − Now", res.Renewed[0].Expiry.Sub(res.Now), time.Minute)
}

func leaseNear(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -leaseTimeTolerance || d > leaseTimeTolerance {
		t.Fatalf("%s = %v, want %v (within %v)", what, got, want, leaseTimeTolerance)
	}
}
