package scenario

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// counts is a counter per message number, allocated a page at a time so
// that a case that handles a few thousand messages does not pay for
// millions. It holds no pointers the collector must scan but the pages.
type counts struct {
	pages [1 << 12]atomic.Pointer[[1 << 14]atomic.Uint32]
}

// maxMessages is how many message numbers counts can hold.
const maxMessages = (1 << 12) * (1 << 14)

func (c *counts) page(n int64) *[1 << 14]atomic.Uint32 {
	slot := &c.pages[n>>14]
	if p := slot.Load(); p != nil {
		return p
	}
	slot.CompareAndSwap(nil, new([1 << 14]atomic.Uint32))
	return slot.Load()
}

// add counts one more for n and returns the new count.
func (c *counts) add(n int64) uint32 { return c.page(n)[n&(1<<14-1)].Add(1) }

// get returns the count of n.
func (c *counts) get(n int64) uint32 {
	p := c.pages[n>>14].Load()
	if p == nil {
		return 0
	}
	return p[n&(1<<14-1)].Load()
}

// Checker is the handler every system runs: it fails a deterministic share
// of first attempts on purpose, counts what was handled so that a fast but
// wrong run is caught, checks per-stream order and records latencies.
type Checker struct {
	failEvery int64 // fail the first attempt of every failEvery-th message; 0: never
	streams   int64 // check order over this many streams; 0: do not check

	attempts, done counts
	last           []atomic.Int64 // per stream: the last number handled, plus one
	handled        atomic.Int64   // messages handled successfully at least once
	dups, disorder atomic.Int64
	phantoms       atomic.Int64 // numbers no message was given

	mu      sync.Mutex
	lat     []time.Duration // enqueue to handler, when recording
	rec     atomic.Bool
	recFrom int64 // the first message number whose latency is kept
}

// NewChecker returns a Checker failing the first attempt of every
// failEvery-th message (none when 0) and checking order over streams
// streams (not when 0).
func NewChecker(failEvery, streams int64) *Checker {
	c := &Checker{failEvery: failEvery, streams: streams}
	if streams > 0 {
		c.last = make([]atomic.Int64, streams)
	}
	return c
}

// RecordLatency makes Handle keep the enqueue-to-handler time of every
// message numbered from on (those before are a warm-up).
func (c *Checker) RecordLatency(from int64) {
	c.recFrom = from
	c.rec.Store(true)
}

// Handle is the Handler of every case.
func (c *Checker) Handle(_ context.Context, m Msg) error {
	if m.N < 0 || m.N >= maxMessages {
		c.phantoms.Add(1)
		return nil
	}
	if c.failEvery > 0 && m.N%c.failEvery == 0 && c.attempts.add(m.N) == 1 {
		return ErrTransient
	}
	if c.rec.Load() && m.N >= c.recFrom {
		d := time.Duration(time.Now().UnixNano() - m.T)
		c.mu.Lock()
		c.lat = append(c.lat, d)
		c.mu.Unlock()
	}
	if c.done.add(m.N) > 1 {
		c.dups.Add(1)
		return nil
	}
	c.handled.Add(1)
	if c.streams > 0 && m.Stream >= 0 {
		last := &c.last[m.Stream%c.streams]
		for {
			prev := last.Load()
			if m.N+1 < prev {
				c.disorder.Add(1)
				break
			}
			if last.CompareAndSwap(prev, m.N+1) {
				break
			}
		}
	}
	return nil
}

// Handled is how many distinct messages were handled successfully.
func (c *Checker) Handled() int64 { return c.handled.Load() }

// Verify fills in r's correctness fields for messages 0 to total-1:
// Missing (never handled), Duplicates (handled again), OutOfOrder
// (handled after a later message of the same stream) and Phantoms
// (handled, but never written).
func (c *Checker) Verify(r *Result, total int64) {
	var missing, phantoms int64
	for n := int64(0); n < maxMessages; n++ {
		switch got := c.done.get(n); {
		case n < total && got == 0:
			missing++
		case n >= total && got > 0:
			phantoms++
		}
		if n >= total && c.done.pages[n>>14].Load() == nil {
			n |= 1<<14 - 1 // skip a page nothing touched
		}
	}
	r.Missing = missing
	r.Phantoms = phantoms + c.phantoms.Load()
	r.Duplicates = c.dups.Load()
	r.OutOfOrder = c.disorder.Load()
}

// Latencies returns the recorded latencies, sorted.
func (c *Checker) Latencies() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.lat)
	slices.Sort(out)
	return out
}
