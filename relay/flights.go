package relay

import (
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// flight is a claimed message whose outcome the store has not recorded.
type flight struct {
	m     *outbox.Message
	dest  *destination // nil for an unconfigured destination
	probe bool         // claimed to probe a destination whose circuit is open
	// until is when, on the relay's clock, the lease may have lapsed: the
	// start of the store call that took or last renewed it plus the lease
	// the store granted (expiry minus the store's clock in that call,
	// store.Result.Now), never more than LeaseDuration; and brought
	// forward when a later call finds the store's clock further ahead
	// (see flights.bound). The store's clock read at least Result.Now
	// when the call reached it, after the call started, so a delivery
	// started before until holds the lease whatever the two clocks read.
	until time.Time
	// expiry is the lease's expiry on the store's clock, as the store
	// last reported it; zero when it did not say.
	expiry  time.Time
	lost    bool // a renewal found the lease gone
	started bool // a worker started delivering it
	// startedAt is when, on the relay's clock, its delivery started;
	// overdue is set once the relay said it ran overdueGrace past its
	// destination's Timeout.
	startedAt time.Time
	overdue   bool
	// reported is set once the outcome is handed to the recorder.
	reported bool
	bytes    int64 // what it counts against PrefetchBytes
	// reclaimed is set when a claim returned the message again while it
	// was in flight here (its lease had lapsed): the copy is not
	// delivered a second time, and once this flight's outcome is
	// recorded the lease the claim took is given back.
	reclaimed bool
}

// flights are the messages the relay holds, by id. The claimer adds them,
// the workers read them before each delivery, and the recorder removes
// them once their outcome is recorded.
type flights struct {
	mu sync.Mutex
	m  map[uuid.UUID]*flight
	// recent holds the ids whose flights ended during the claim call
	// under way; nil when none is.
	recent map[uuid.UUID]struct{}
	// bytes is what the flights held count against PrefetchBytes
	// (messageBytes); ended counts the flights ended so far.
	bytes int64
	ended uint64
	// bigAt is PrefetchBytes: a flight of more bytes is big, and big and
	// bigBytes count those held (in bytes too). The claims leave a big
	// flight out of what they count against the budget (heldBudget).
	bigAt    int64
	big      int
	bigBytes int64
}

func newFlights() *flights { return &flights{m: make(map[uuid.UUID]*flight)} }

// newBudgetFlights returns flights that tell a message larger than
// budget (PrefetchBytes) apart.
func newBudgetFlights(budget int64) *flights {
	fs := newFlights()
	fs.bigAt = budget
	return fs
}

func (fs *flights) len() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.m)
}

// held reports how many flights there are, the bytes they hold and how
// many have ended so far.
func (fs *flights) held() (n int, bytes int64, ended uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.m), fs.bytes, fs.ended
}

// heldBudget reports how many flights there are, what they count
// against PrefetchBytes with the bytes of the big ones (each larger than
// the budget by itself) left out, and whether a big one is held.
func (fs *flights) heldBudget() (n int, bytes int64, big bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.m), fs.bytes - fs.bigBytes, fs.big > 0
}

// isBig reports whether a flight of bytes is larger than the budget.
func (fs *flights) isBig(bytes int64) bool { return fs.bigAt > 0 && bytes > fs.bigAt }

// perDestination counts the flights of each configured destination.
func (fs *flights) perDestination() map[*destination]int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make(map[*destination]int64)
	for _, f := range fs.m {
		if f.dest != nil {
			out[f.dest]++
		}
	}
	return out
}

// add starts a flight; fs.mu is held.
func (fs *flights) add(f *flight) {
	f.bytes = messageBytes(f.m)
	fs.m[f.m.ID] = f
	fs.bytes += f.bytes
	if fs.isBig(f.bytes) {
		fs.big++
		fs.bigBytes += f.bytes
	}
}

// end ends the flight of id; fs.mu is held.
func (fs *flights) end(id uuid.UUID, f *flight) {
	delete(fs.m, id)
	fs.bytes -= f.bytes
	if fs.isBig(f.bytes) {
		fs.big--
		fs.bigBytes -= f.bytes
	}
	fs.ended++
}

// startable reports whether a delivery of m may start at now, and marks
// it started if so: the relay still holds it, its lease was not lost, and
// it does not lapse within margin.
func (fs *flights) startable(id uuid.UUID, now time.Time, margin time.Duration) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[id]
	if !f.held(now, margin) {
		return false
	}
	f.started, f.startedAt = true, now
	return true
}

// held reports whether the relay holds f's lease, margin ahead of now: f
// is in flight here, its lease was not lost and does not lapse within
// margin (leaseLeft).
func (f *flight) held(now time.Time, margin time.Duration) bool {
	return f != nil && !f.lost && leaseLeft(now, f.until) > margin
}

// leaseLeft is the time from now to until, the lesser of the two readings
// of the real clock: the monotonic one (what time.Time's Sub reads when
// both times have it) and the wall one. Linux's monotonic clock does not
// count a suspend of the host (a laptop's lid closed, a VM suspended and
// resumed): read on it alone, a lease granted before a suspend longer
// than the lease still had its time on resume, while the database's clock
// had run on and another instance had claimed the message; the relay went
// on to deliver it again (and in a strict stream, after a later one). The
// wall clock is set again on resume. A wall clock stepped forward without
// a suspend makes leases look shorter until their next renewal; their
// messages are given back, not delivered twice. A fake clock has one
// reading.
func leaseLeft(now, until time.Time) time.Duration {
	return min(until.Sub(now), until.Round(0).Sub(now.Round(0)))
}

// holds reports whether the relay still holds id's lease, margin ahead of
// now.
func (fs *flights) holds(id uuid.UUID, now time.Time, margin time.Duration) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[id].held(now, margin)
}

// overdueGrace is how long past its Timeout a delivery may take to return
// before the relay says it is overdue: a transport honours its context's
// deadline well within it.
const overdueGrace = 5 * time.Second

// overdueAt returns the flights whose delivery has not returned
// overdueGrace past its destination's Timeout and was not yet said to,
// marking them; and how many are overdue in all.
func (fs *flights) overdueAt(now time.Time) (fresh []*flight, n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.m {
		if !f.started || f.reported || f.dest == nil || now.Before(f.startedAt.Add(f.dest.timeout+overdueGrace)) {
			continue
		}
		n++
		if !f.overdue {
			f.overdue = true
			fresh = append(fresh, f)
		}
	}
	return fresh, n
}

// bound brings each flight's until forward to start + (expiry − storeNow)
// when that is earlier: a store call that started at start on the relay's
// clock found the store's clock at storeNow or later, so a lease that
// lapses at expiry on the store's clock lapses no later than that on the
// relay's, even if the store's clock stepped ahead after the lease was
// granted. A zero storeNow (the store did not say) changes nothing.
func (fs *flights) bound(start, storeNow time.Time) {
	if storeNow.IsZero() {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.m {
		if f.expiry.IsZero() {
			continue
		}
		if u := start.Add(f.expiry.Sub(storeNow)); u.Before(f.until) {
			f.until = u
		}
	}
}

// leaseUntil is when, on the relay's clock, a lease the store granted
// until expiry in a call that started at start and found the store's
// clock at storeNow may lapse: start plus the lease granted, never more
// than lease. Without expiry or storeNow it is start + lease.
func leaseUntil(start, expiry, storeNow time.Time, lease time.Duration) time.Time {
	until := start.Add(lease)
	if expiry.IsZero() || storeNow.IsZero() {
		return until
	}
	if u := start.Add(expiry.Sub(storeNow)); u.Before(until) {
		return u
	}
	return until
}

// renewable lists the messages whose leases the relay renews: every one
// it holds but those whose lease was lost.
func (fs *flights) renewable() []uuid.UUID {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(fs.m))
	for id, f := range fs.m {
		if !f.lost {
			ids = append(ids, id)
		}
	}
	return ids
}

// anyOrdered reports whether any of ids is a message of an ordered stream
// (store.Batch.LazyCommit): its Stream set and its ordering not none. One
// the relay does not hold counts as ordered.
func (fs *flights) anyOrdered(ids []uuid.UUID) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, id := range ids {
		f := fs.m[id]
		if f == nil || f.m.Stream != "" && f.m.Ordering != outbox.OrderingNone {
			return true
		}
	}
	return false
}

// watch starts (on) or ends the watch a claim call keeps: the ids whose
// flights end while it is under way are noted in recent, so that the
// claim does not deliver again a message whose outcome was recorded after
// the claim read it.
func (fs *flights) watch(on bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if on {
		fs.recent = make(map[uuid.UUID]struct{})
	} else {
		fs.recent = nil
	}
}

// leaseEnd is when, on the relay's clock, the relay stops holding id's
// lease as it knows it (flight.until), and whether it holds it at all.
func (fs *flights) leaseEnd(id uuid.UUID) (time.Time, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[id]
	if f == nil || f.lost {
		return time.Time{}, false
	}
	return f.until, true
}

// soonest returns the n of ids whose leases, as the relay knows them
// (flight.until), end first.
func (fs *flights) soonest(ids []uuid.UUID, n int) []uuid.UUID {
	fs.mu.Lock()
	until := make(map[uuid.UUID]time.Time, len(ids))
	for _, id := range ids {
		if f, ok := fs.m[id]; ok {
			until[id] = f.until
		}
	}
	fs.mu.Unlock()
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return until[a].Compare(until[b]) })
	return out[:min(n, len(out))]
}
