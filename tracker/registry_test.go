package tracker

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// checkList fails unless the registry's list and map agree.
func checkList(t *testing.T, r *Registry) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	var prev *Tracker
	for e := r.head; e != nil; e = e.next {
		if e.prev != prev {
			t.Fatalf("broken prev link at %q", e.key)
		}
		if r.entries[e.key] != e {
			t.Fatalf("list holds %q, map does not", e.key)
		}
		prev = e
		n++
	}
	if prev != r.tail || n != len(r.entries) {
		t.Fatalf("list has %d entries, map %d (tail ok: %v)", n, len(r.entries), prev == r.tail)
	}
}

func present(r *Registry, keys ...string) string {
	s := ""
	for _, k := range keys {
		if _, ok := r.Lookup(k); ok {
			s += k
		} else {
			s += "-"
		}
	}
	return s
}

func TestRegistryGetNamesAndReuses(t *testing.T) {
	t.Parallel()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: newFake(), Name: "dest", Logger: discard}})
	a := r.Get("a")
	if r.Get("a") != a || r.Len() != 1 {
		t.Fatal("Get did not reuse the tracker")
	}
	if a.Name() != "dest/a" {
		t.Fatalf("name = %q", a.Name())
	}
	if NewRegistry(RegistryConfig{}).Get("k").Name() != "k" {
		t.Fatal("unprefixed name")
	}
	if _, ok := r.Lookup("b"); ok || r.Len() != 1 {
		t.Fatal("Lookup made a tracker")
	}
	r.Delete("a")
	r.Delete("nope")
	if r.Len() != 0 || r.Get("a") == a {
		t.Fatal("Delete did not forget the tracker")
	}
	checkList(t, r)
}

func TestRegistryEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: newFake(), Logger: discard}, MaxEntries: 3})
	r.Get("a")
	r.Get("b")
	r.Get("c")
	r.Get("a") // b is now the least recently used
	r.Get("d")
	if got := present(r, "a", "b", "c", "d"); got != "a-cd" {
		t.Fatalf("present = %q, want a-cd", got)
	}
	r.Get("e") // c
	if got := present(r, "a", "c", "d", "e"); got != "a-de" {
		t.Fatalf("present = %q, want a-de", got)
	}
	checkList(t, r)
}

func TestRegistryEvictionPrefersHealthy(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: time.Minute}, Logger: discard}, MaxEntries: 3})
	r.Get("a").Fault() // backing off, least recently used
	r.Get("b").Fault() // backing off
	r.Get("c")         // healthy
	r.Get("d")
	if got := present(r, "a", "b", "c", "d"); got != "ab-d" {
		t.Fatalf("present = %q, want ab-d: the healthy one goes first", got)
	}

	// Next best: a tracker whose back-off has elapsed, over one backing off.
	r.Get("d").Fault()
	c.Advance(time.Minute) // every back-off elapses
	r.Get("b").Fault()     // b backs off again
	r.Get("d").Fault()     // d too; a is elapsed and least recently used
	r.Get("e")
	if got := present(r, "a", "b", "d", "e"); got != "-bde" {
		t.Fatalf("present = %q, want -bde", got)
	}

	// All backing off: the least recently used goes.
	r.Get("e").Fault()
	r.Get("f")
	if got := present(r, "b", "d", "e", "f"); got != "-def" {
		t.Fatalf("present = %q, want -def", got)
	}
	checkList(t, r)
}

func TestRegistryIdleEvictionIsLazy(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: time.Second}, Logger: discard}, IdleTTL: time.Minute})
	r.Get("a")
	r.Get("b").Fault() // back-off 1s, elapsed long before it is idle
	c.Advance(59 * time.Second)
	r.Get("c")
	if r.Len() != 3 {
		t.Fatalf("Len = %d before the TTL, want 3", r.Len())
	}
	c.Advance(time.Second)
	r.Get("c") // a and b have been idle for a minute
	if got := present(r, "a", "b", "c"); got != "--c" {
		t.Fatalf("present = %q, want --c", got)
	}
	checkList(t, r)
}

func TestRegistryKeepsIdleTrackersThatAreBackingOff(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: time.Hour, stopAfter: 1}, Logger: discard}, IdleTTL: time.Minute})
	r.Get("hour").Fault()      // backs off for an hour
	r.Get("never").Fault()     // first fault: an hour
	r.Get("never").Fault()     // second: stop
	r.Get("idle")              // healthy
	c.Advance(2 * time.Minute) // all idle
	r.Get("x")                 // lazy: examines two
	r.Get("x")                 // and two more
	r.Get("x")                 // and the rotated ones again
	if got := present(r, "hour", "never", "idle", "x"); got != "hournever-x" {
		t.Fatalf("present = %q, want hournever-x", got)
	}
	if n := r.Sweep(); n != 0 {
		t.Fatalf("Sweep = %d, want 0", n)
	}
	c.Advance(time.Hour) // hour's back-off has elapsed; never's has not
	if n := r.Sweep(); n != 2 {
		t.Fatalf("Sweep = %d, want 2 (hour and x)", n)
	}
	if got := present(r, "hour", "never", "x"); got != "-never-" {
		t.Fatalf("present = %q, want -never-", got)
	}
	r.Get("never").Success()
	c.Advance(time.Minute)
	if n := r.Sweep(); n != 1 || r.Len() != 0 {
		t.Fatalf("Sweep = %d, Len = %d; want 1, 0", n, r.Len())
	}
	checkList(t, r)
}

func TestRegistryIdleEvictionOff(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Logger: discard}, IdleTTL: -1})
	r.Get("a")
	c.Advance(1000 * time.Hour)
	r.Get("b")
	if r.Sweep() != 0 || r.Len() != 2 {
		t.Fatal("idle eviction happened while turned off")
	}
	// The default TTL is an hour.
	d := NewRegistry(RegistryConfig{Config: Config{Clock: c, Logger: discard}})
	d.Get("a")
	c.Advance(DefaultIdleTTL - time.Nanosecond)
	if d.Sweep() != 0 {
		t.Fatal("evicted before DefaultIdleTTL")
	}
	c.Advance(time.Nanosecond)
	if d.Sweep() != 1 {
		t.Fatal("not evicted at DefaultIdleTTL")
	}
}

func TestRegistryMemoryIsBounded(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Logger: discard}, MaxEntries: 1000, IdleTTL: -1})
	for i := range 100_000 {
		tr := r.Get(fmt.Sprintf("key-%d", i))
		if i%3 == 0 {
			tr.Fault() // failing trackers are bounded too
		}
		if n := r.Len(); n > 1000 {
			t.Fatalf("Len = %d after %d keys", n, i+1)
		}
	}
	if r.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", r.Len())
	}
	checkList(t, r)

	d := NewRegistry(RegistryConfig{Config: Config{Clock: c, Logger: discard}})
	for i := range DefaultMaxEntries + 10 {
		d.Get(fmt.Sprint(i))
	}
	if d.Len() != DefaultMaxEntries {
		t.Fatalf("default capacity: Len = %d", d.Len())
	}
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	c := newFake()
	r := NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: time.Millisecond}, Logger: discard},
		MaxEntries: 50, IdleTTL: 5 * time.Millisecond})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				key := fmt.Sprint((g*7919 + i*31) % 200)
				switch i % 7 {
				case 0:
					r.Delete(key)
				case 1:
					r.Sweep()
				case 2:
					c.Advance(time.Millisecond)
				case 3:
					r.Get(key).Success()
				default:
					tr := r.Get(key)
					if _, ok := tr.TryProceed(); ok {
						tr.Fault()
					}
				}
				if r.Len() > 50 {
					t.Errorf("Len = %d > 50", r.Len())
					return
				}
			}
		}()
	}
	wg.Wait()
	checkList(t, r)
}
