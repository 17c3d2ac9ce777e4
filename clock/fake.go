package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. It is safe for concurrent
// use. Tests advance it with Advance or Set, and use WaitForTimers to learn,
// without sleeping, that the code under test is now waiting on a timer.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	elapsed time.Duration // what Advance and Set moved it: its monotonic reading
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the timer set grows
}

// NewFake returns a Fake clock reading now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, when: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		t.fired = true
		return t
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due,
// in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t (never backwards) and fires the due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.elapsed += t.Sub(f.now)
		f.now = t
	}
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.when.After(f.now) {
			tm.fired = true
			tm.c <- f.now
			continue
		}
		kept = append(kept, tm)
	}
	for i := len(kept); i < len(f.timers); i++ {
		f.timers[i] = nil
	}
	f.timers = kept
}

// Step moves the clock's reading by d, forward or back, as a wall clock
// stepped by hand or by NTP: no time passes, so its monotonic reading
// stays and no timer fires.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Monotonic returns how much time passed on the clock since NewFake: what
// Advance and Set moved it, not what Step did.
func (f *Fake) Monotonic() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.elapsed
}

// Pending returns the number of timers that have not fired or been stopped.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns when the earliest pending timer fires, and false if
// none is pending.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for _, t := range f.timers {
		if next.IsZero() || t.when.Before(next) {
			next = t.when
		}
	}
	return next, !next.IsZero()
}

// WaitForTimers blocks until at least n timers are pending or done is
// closed, and reports whether the count was reached. It is the signal tests
// use instead of sleeping: "the code under test is now waiting".
func (f *Fake) WaitForTimers(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// AdvanceToNext waits for a pending timer (or done), then moves the clock
// to its deadline, firing it. It returns the duration advanced.
func (f *Fake) AdvanceToNext(done <-chan struct{}) (time.Duration, bool) {
	if !f.WaitForTimers(1, done) {
		return 0, false
	}
	next, _ := f.NextDeadline()
	before := f.Now()
	f.Set(next)
	return next.Sub(before), true
}

type fakeTimer struct {
	f     *Fake
	when  time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, other := range t.f.timers {
		if other == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
