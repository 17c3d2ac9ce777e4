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
	last     map[string]time.Time // last arrival of each id
	released map[string]bool      // poison ids an operator released: never expected
	by       map[string]int       // arrivals by instance
	changed  chan struct{}
}

func newLedger() *ledger {
	return &ledger{sent: map[string]*sent{}, first: map[string]time.Time{}, last: map[string]time.Time{}, released: map[string]bool{}, by: map[string]int{}, changed: make(chan struct{})}
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
	l.last[a.id] = a.at
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

// caughtUp returns a condition, for waitFor, that holds once every message
// committed up to now (but those held back on purpose: skip) has arrived.
func (l *ledger) caughtUp(skip func(*sent) bool) func() bool {
	l.mu.Lock()
	pending := make([]*sent, 0, len(l.order))
	for _, m := range l.order {
		if skip == nil || !skip(m) {
			pending = append(pending, m)
		}
	}
	l.mu.Unlock()
	return func() bool {
		for len(pending) > 0 {
			m := pending[len(pending)-1]
			if _, ok := l.first[m.id]; !ok && !l.released[m.id] {
				// Scan from the newest: the oldest arrive first, so
				// a miss here usually means the whole tail is pending.
				return false
			}
			pending = pending[:len(pending)-1]
		}
		return true
	}
}

// backlog returns how many committed messages have not arrived yet.
func (l *ledger) backlog() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order) - len(l.first)
}

// resent returns a condition, for waitFor, that holds once each of ids
// has arrived at or after t: the messages a dead or stopped relay held
// were delivered by another (again, if it had sent them already).
func (l *ledger) resent(ids []string, t time.Time) func() bool {
	return func() bool {
		for len(ids) > 0 {
			if at, ok := l.last[ids[0]]; !ok || at.Before(t) {
				return false
			}
			ids = ids[1:]
		}
		return true
	}
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
	DupAt                                []time.Time
	Phantom                              int // arrivals of ids never committed
	PhantomNotes                         []string
}

// check compares the arrivals with what was committed. A message is
// expected unless an operator released it; it is lost when it never
// arrived. An order violation is a first arrival of a message while an
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
		streams[m.stream] = append(streams[m.stream], m.n)
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
			if h, ok := highest[m.stream]; ok && h > m.n {
				v.Stale++
				v.StaleAt = append(v.StaleAt, a.at)
			}
			continue
		}
		seen[a.id] = true
		v.Unique++
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
