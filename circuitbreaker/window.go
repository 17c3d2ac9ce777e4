package circuitbreaker

import (
	"sync"
	"sync/atomic"
)

// window counts outcomes over a sliding window kept as a ring of
// WindowBuckets buckets, each width ticks long. A bucket holds the counts
// of one period, named by its epoch (ticks / width); a call that lands on a
// bucket still holding an older epoch first retires it.
//
// Retiring moves a bucket's counts into the retired totals, so that the
// lifetime totals are retired + every bucket, and the hot path adds to one
// counter only. Recording takes no lock; retiring takes mu.
type window struct {
	width   int64 // ticks per bucket
	_       [56]byte
	buckets [WindowBuckets]bucket

	mu          sync.Mutex // serialises retiring
	retiredSucc atomic.Int64
	retiredFail atomic.Int64
}

type bucket struct {
	epoch atomic.Int64
	succ  atomic.Int64
	fail  atomic.Int64
}

// add counts one outcome at time ticks.
func (w *window) add(ticks int64, failure bool) {
	epoch := ticks / w.width
	b := &w.buckets[epoch%WindowBuckets]
	if e := b.epoch.Load(); e != epoch {
		if !w.turn(b, epoch) {
			// The outcome is older than the bucket's period (a caller
			// was held up for a whole window): count it in the totals
			// only.
			w.addRetired(failure)
			return
		}
	}
	if failure {
		b.fail.Add(1)
	} else {
		b.succ.Add(1)
	}
}

// turn makes b hold epoch, retiring its older counts. It reports false when
// b already holds a newer epoch.
func (w *window) turn(b *bucket, epoch int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e := b.epoch.Load(); {
	case e > epoch:
		return false
	case e < epoch:
		w.retiredSucc.Add(b.succ.Swap(0))
		w.retiredFail.Add(b.fail.Swap(0))
		b.epoch.Store(epoch)
	}
	return true
}

func (w *window) addRetired(failure bool) {
	if failure {
		w.retiredFail.Add(1)
	} else {
		w.retiredSucc.Add(1)
	}
}

// counts returns the successes and failures in the window ending at ticks.
func (w *window) counts(ticks int64) (succ, fail int64) {
	now := ticks / w.width
	for i := range w.buckets {
		b := &w.buckets[i]
		if e := b.epoch.Load(); e > now-WindowBuckets && e <= now {
			succ += b.succ.Load()
			fail += b.fail.Load()
		}
	}
	return succ, fail
}

// totals returns every success and failure ever counted. It is exact when
// no add or retire runs at the same time.
func (w *window) totals() (succ, fail int64) {
	succ, fail = w.retiredSucc.Load(), w.retiredFail.Load()
	for i := range w.buckets {
		succ += w.buckets[i].succ.Load()
		fail += w.buckets[i].fail.Load()
	}
	return succ, fail
}

// totalsLocked is totals made exact against concurrent retiring.
func (w *window) totalsLocked() (succ, fail int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.totals()
}

// clear empties the window, keeping the totals.
func (w *window) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		b := &w.buckets[i]
		w.retiredSucc.Add(b.succ.Swap(0))
		w.retiredFail.Add(b.fail.Swap(0))
	}
}
