package chaos

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// arrival is one delivery the receiver accepted.
type arrival struct {
	id       string
	stream   string
	n        int
	at       time.Time
	instance string
}

// sent is one message the load generator committed.
type sent struct {
	id     string
	stream string
	n      int
	at     time.Time // when its transaction committed
	poison bool
}

// ledger holds what was committed to the outbox and what arrived, and
// wakes waiters on every change.
type ledger struct {
	mu       sync.Mutex
	sent     map[string]*sent
	order    []*sent // in commit order
	arrivals []arrival
	first    map[string]time.Time // first arrival of each id
	released map[string]bool      // poison ids an operator released: never expected
	by       map[string]int       // arrivals by instance
	changed  chan struct{}
}

func newLedger() *ledger {
	return &ledger{sent: map[string]*sent{}, first: map[string]time.Time{}, released: map[string]bool{}, by: map[string]int{}, changed: make(chan struct{})}
}

func (l *ledger) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *ledger) record(a arrival) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.arrivals = append(l.arrivals, a)
	l.by[a.instance]++
	if _, ok := l.first[a.id]; !ok {
		l.first[a.id] = a.at
	}
	l.notifyLocked()
}

func (l *ledger) committed(ms ...*sent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range ms {
		l.sent[m.id] = m
		l.order = append(l.order, m)
	}
	l.notifyLocked()
}

func (l *ledger) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released[id] = true
	l.notifyLocked()
}

// waitFor waits until cond, called under the ledger's lock, holds, or ctx
// or the timeout ends first.
func (l *ledger) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("%w after %v", errDeadline, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// recovery is what a recovery waits for in the ledger: every message
// committed before it began has arrived (but those held back on purpose),
// and so has each message a dead or stopped relay held a lease on. (That
// those are no longer pending in the outbox, delivered again by another
// relay or recorded by the faulted one, is the store's to say: see
// settled.)
type recovery struct {
	l        *ledger
	pending  []*sent
	stranded []string
}

// recoveryFrom snapshots what has to arrive: skip tells the messages held
// back on purpose.
func (l *ledger) recoveryFrom(skip func(*sent) bool, stranded []string) *recovery {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &recovery{l: l, stranded: stranded}
	for _, m := range l.order {
		if skip == nil || !skip(m) {
			r.pending = append(r.pending, m)
		}
	}
	return r
}

// done is a condition for waitFor (called under the ledger's lock).
func (r *recovery) done() bool {
	for len(r.pending) > 0 {
		m := r.pending[len(r.pending)-1]
		if _, ok := r.l.first[m.id]; !ok && !r.l.released[m.id] {
			// Scan from the newest: the oldest arrive first, so a
			// miss here usually means the whole tail is pending.
			return false
		}
		r.pending = r.pending[:len(r.pending)-1]
	}
	for _, id := range r.stranded {
		if _, ok := r.l.first[id]; !ok {
			return false
		}
	}
	return true
}

// left returns the ids still awaited: never arrived.
func (r *recovery) left() []string {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	var never []string
	for _, m := range r.pending {
		if _, ok := r.l.first[m.id]; !ok && !r.l.released[m.id] {
			never = append(never, m.id)
		}
	}
	for _, id := range r.stranded {
		if _, ok := r.l.first[id]; !ok {
			never = append(never, id)
		}
	}
	return never
}

// settle waits until r is done and none of the stranded messages is
// still pending in the outbox (pending counts them: the store has no
// signal for it, so it is polled every 20 ms), and returns when that was.
func (r *recovery) settle(ctx context.Context, limit time.Duration, pending func([]string) (int, error)) (time.Time, error) {
	deadline := time.Now().Add(limit)
	if err := r.l.waitFor(ctx, limit, r.done); err != nil {
		return time.Time{}, fmt.Errorf("%w: %d messages never arrived", err, len(r.left()))
	}
	if len(r.stranded) == 0 {
		return time.Now(), nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := pending(r.stranded)
		if err != nil {
			return time.Time{}, err
		}
		if n == 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%w after %v: %d messages the faulted relay held are still pending", errDeadline, limit, n)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// backlog returns how many committed messages have not arrived yet.
func (l *ledger) backlog() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order) - len(l.first)
}

// committedBetween returns the ids of the messages committed from from
// until to.
func (l *ledger) committedBetween(from, to time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, m := range l.order {
		if !m.at.Before(from) && m.at.Before(to) {
			ids = append(ids, m.id)
		}
	}
	return ids
}

// arrivedCount returns how many arrivals there have been.
func (l *ledger) arrivedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.arrivals)
}

// arrivedFrom returns how many arrivals instance made.
func (l *ledger) arrivedFrom(instance string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[instance]
}

// arrivedBeyond returns how many distinct messages of stream after number
// n have arrived.
func (l *ledger) arrivedBeyond(stream string, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range l.arrivals {
		if a.stream == stream && a.n > n {
			seen[a.id] = true
		}
	}
	return len(seen)
}

// committedBeyond reports whether a message of stream after number n was
// committed.
func (l *ledger) committedBeyond(stream string, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.order) - 1; i >= 0; i-- {
		if m := l.order[i]; m.stream == stream && m.n > n {
			return true
		}
	}
	return false
}

// verdict is what the ledger says at the end.
type verdict struct {
	Committed, Expected, Arrived, Unique int
	Lost                                 int
	LostIDs                              []string
	OrderViolations                      int
	ViolationNotes                       []string
	Duplicates                           int
	Stale                                int // duplicates that arrived after a later message of their stream
	StaleAt                              []time.Time
	StaleBy                              map[string]int // stale re-sends by the instance that sent them
	DupAt                                []time.Time
	DupNotes                             []string // what each duplicate was: the message, who sent it and when, both times
	Phantom                              int      // arrivals of ids never committed
	PhantomNotes                         []string
}

// check compares the arrivals with what was committed. A message is
// expected unless an operator released it; it is lost when it never
// arrived. Messages with no stream have no order to keep. An order violation is a first arrival of a message while an
// earlier expected message of its stream had not arrived yet. A duplicate
// is any arrival after the first; it is stale when a later message of its
// stream had already arrived.
func (l *ledger) check() verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v verdict
	v.Committed, v.Arrived = len(l.order), len(l.arrivals)
	// Expected messages of each stream, by n.
	streams := map[string][]int{}
	for _, m := range l.order {
		if l.released[m.id] {
			continue
		}
		v.Expected++
		if m.stream != "" { // no stream, no order
			streams[m.stream] = append(streams[m.stream], m.n)
		}
		if _, ok := l.first[m.id]; !ok {
			v.Lost++
			if len(v.LostIDs) < 10 {
				v.LostIDs = append(v.LostIDs, fmt.Sprintf("%s (%s #%d)", m.id, m.stream, m.n))
			}
		}
	}
	for _, ns := range streams {
		sort.Ints(ns)
	}
	low := map[string]int{}     // index into streams[s] of its lowest expected message not arrived yet
	highest := map[string]int{} // highest n arrived per stream
	seen := map[string]bool{}
	firstBy := map[string]arrival{}
	arrivedN := map[string]map[int]bool{}
	for _, a := range l.arrivals {
		m, ok := l.sent[a.id]
		if !ok {
			v.Phantom++
			if len(v.PhantomNotes) < 10 {
				v.PhantomNotes = append(v.PhantomNotes, fmt.Sprintf("%s (%s #%d by %s at %s)", a.id, a.stream, a.n, a.instance, a.at.Format("15:04:05.000")))
			}
			continue
		}
		if seen[a.id] {
			v.Duplicates++
			v.DupAt = append(v.DupAt, a.at)
			f := firstBy[a.id]
			v.DupNotes = append(v.DupNotes, fmt.Sprintf("%s (%s #%d) by %s at %s, first by %s at %s",
				a.id, a.stream, a.n, a.instance, a.at.Format("15:04:05.000"), f.instance, f.at.Format("15:04:05.000")))
			if h, ok := highest[m.stream]; ok && h > m.n && m.stream != "" {
				v.Stale++
				v.StaleAt = append(v.StaleAt, a.at)
				if v.StaleBy == nil {
					v.StaleBy = map[string]int{}
				}
				v.StaleBy[a.instance]++
			}
			continue
		}
		seen[a.id] = true
		firstBy[a.id] = a
		v.Unique++
		if m.stream == "" {
			continue
		}
		if h, ok := highest[m.stream]; !ok || m.n > h {
			highest[m.stream] = m.n
		}
		if arrivedN[m.stream] == nil {
			arrivedN[m.stream] = map[int]bool{}
		}
		arrivedN[m.stream][m.n] = true
		if l.released[a.id] {
			continue // released, then delivered anyway: counted, not ordered
		}
		ns, i := streams[m.stream], low[m.stream]
		for i < len(ns) && arrivedN[m.stream][ns[i]] {
			i++
		}
		low[m.stream] = i
		if i < len(ns) && ns[i] < m.n {
			v.OrderViolations++
			if len(v.ViolationNotes) < 10 {
				v.ViolationNotes = append(v.ViolationNotes, fmt.Sprintf("%s #%d arrived before #%d (sent by %s at %s)",
					m.stream, m.n, ns[i], a.instance, a.at.Format("15:04:05.000")))
			}
		}
	}
	return v
}
