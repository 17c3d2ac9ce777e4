package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var instanceCases = []testCase{
	{"DeadInstanceWorkIsPickedUpByAnother", testDeadInstance},
	{"HeartbeatKeepsInstanceAlive", testHeartbeat},
	{"OrderWithinStreamKeptAcrossCrash", testOrderAcrossCrash},
	{"OrderKeptWhenOnlyLeasesExpire", testOrderAcrossLeaseExpiry},
}

var concurrencyCases = []testCase{
	{"ConcurrentInstancesNeverShareAMessage", testConcurrentClaims},
}

var retentionCases = []testCase{
	{"PublishedIsDeletedWithoutRetention", testPublishedDeleted},
	{"RetentionKeepsPublishedUntilSweep", testRetentionSweep},
}

// long is a claim whose lease outlives the instance timeout, so only the
// dead-instance rule can free it.
func long(limit int) store.ClaimRequest {
	return store.ClaimRequest{Limit: limit, Lease: 10 * time.Minute}
}

func testDeadInstance(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", "s"))[0]
	r := e.batch("a", store.Batch{Instance: store.Instance{Host: "h1", PID: 7, StartedAt: epoch}, Claim: long(1)})
	sameIDs(t, "claimed", r.Claimed, m)
	e.clk.Advance(60 * time.Second)
	r = e.batch("b", store.Batch{Claim: long(1)})
	eq(t, "DeadInstances at the timeout", r.DeadInstances, 0)
	sameIDs(t, "claimed at the timeout", r.Claimed)
	e.clk.Advance(time.Second)
	r = e.batch("b", store.Batch{Claim: long(1)})
	eq(t, "DeadInstances", r.DeadInstances, 1)
	sameIDs(t, "claimed", r.Claimed, m)
	eq(t, "InstanceID", e.get(m.ID).InstanceID, "b")
	stale := e.fail("a", store.Failure{ID: m.ID})
	sameUUIDs(t, "Stale", stale.Stale, m.ID)
	// a came back: it is a live instance again, and b is not dead either.
	eq(t, "DeadInstances after return", e.batch("b", store.Batch{}).DeadInstances, 0)
}

func testHeartbeat(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed", e.batch("a", store.Batch{Claim: long(1)}).Claimed, m)
	for range 3 {
		e.clk.Advance(40 * time.Second)
		e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}})
	}
	e.clk.Advance(40 * time.Second)
	r := e.batch("b", store.Batch{Claim: long(1)})
	eq(t, "DeadInstances", r.DeadInstances, 0)
	sameIDs(t, "claimed", r.Claimed)
}

func testOrderAcrossCrash(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	sameIDs(t, "a claimed", e.batch("a", store.Batch{Claim: long(2)}).Claimed, m[0], m[1])
	e.clk.Advance(61 * time.Second) // a died
	r := e.batch("b", store.Batch{Claim: long(10)})
	eq(t, "DeadInstances", r.DeadInstances, 1)
	sameIDs(t, "b claimed", r.Claimed, m...)
}

func testOrderAcrossLeaseExpiry(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("a", 2, m[0], m[1])
	e.clk.Advance(31 * time.Second)
	// b must take M1 before anything later: with limit 1 it gets M1, and
	// M2 waits behind b's lease.
	e.claimExactly("b", 1, m[0])
	e.claimExactly("c", 10)
	e.complete("b", outbox.StatusPublished, m[0].ID)
	e.claimExactly("c", 10, m[1], m[2])
}

func testConcurrentClaims(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var all []*outbox.Message
	for i := range 240 {
		stream := ""
		if i%3 != 0 {
			stream = fmt.Sprintf("s%d", i%7)
		}
		all = append(all, msg(fmt.Sprintf("d%d", i%2), stream))
	}
	e.enqueue(all...)
	const workers = 8
	var (
		mu      sync.Mutex
		claimed = map[uuid.UUID]string{}
		done    int
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := fmt.Sprintf("worker-%d", w)
			var prev []store.Completion
			for range 5000 {
				b := &store.Batch{Instance: store.Instance{ID: inst}, Completions: prev, Claim: store.ClaimRequest{Limit: 7}}
				r, err := e.s.ProcessBatch(context.Background(), b)
				if err != nil {
					errs <- err
					return
				}
				prev = prev[:0]
				mu.Lock()
				done += len(b.Completions)
				for _, m := range r.Claimed {
					if other, dup := claimed[m.ID]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("%s claimed %s already claimed by %s", inst, m.ID, other)
						return
					}
					claimed[m.ID] = inst
					prev = append(prev, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
				}
				finished := done == len(all)
				mu.Unlock()
				if finished {
					return
				}
			}
			errs <- fmt.Errorf("%s gave up before the outbox drained", inst)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eq(t, "messages claimed", len(claimed), len(all))
	for _, m := range all {
		e.mustBeGone(m.ID)
	}
}

func testPublishedDeleted(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.complete("a", outbox.StatusPublished|outbox.StatusEventStored, m.ID)
	e.mustBeGone(m.ID)
	n, err := e.s.Sweep(e.ctx)
	noErr(t, "Sweep", err)
	eq(t, "swept", n, 0)
}

func testRetentionSweep(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) { c.Retention = time.Hour })
	m := e.enqueue(msgs(2, "d", "")...)
	e.claimExactly("a", 2, m...)
	e.complete("a", outbox.StatusPublished, m[0].ID)
	got := e.get(m[0].ID)
	eq(t, "Status", got.Status, outbox.StatusStored|outbox.StatusPublished)
	eq(t, "InstanceID", got.InstanceID, "")
	e.clk.Advance(time.Minute)
	e.complete("a", outbox.StatusPublished, m[1].ID)
	e.claimExactly("b", 10)
	e.clk.Advance(59 * time.Minute)
	n, err := e.s.Sweep(e.ctx)
	noErr(t, "Sweep", err)
	eq(t, "swept at retention of the first", n, 1)
	e.mustBeGone(m[0].ID)
	e.get(m[1].ID)
	e.clk.Advance(time.Minute)
	n, err = e.s.Sweep(e.ctx)
	noErr(t, "Sweep", err)
	eq(t, "swept later", n, 1)
	e.mustBeGone(m[1].ID)
}
