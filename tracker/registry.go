package tracker

import (
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
)

// Registry defaults.
const (
	// DefaultMaxEntries is the capacity of a Registry whose
	// RegistryConfig.MaxEntries is zero.
	DefaultMaxEntries = 10000
	// DefaultIdleTTL is the idle time after which a Registry forgets a
	// tracker when RegistryConfig.IdleTTL is zero.
	DefaultIdleTTL = time.Hour
)

// evictWindow is how many least recently used entries a full Registry
// inspects to find one that is cheap to forget; lazySweep is how many idle
// entries each Get examines.
const (
	evictWindow = 8
	lazySweep   = 2
)

// RegistryConfig configures a Registry. Its zero value is ready to use.
type RegistryConfig struct {
	// Config is the template for every tracker the registry makes. Its
	// Name is a prefix: a tracker is named Name + "/" + key, or key alone
	// when Name is empty. Its Clock also times the registry's idle
	// eviction.
	Config
	// MaxEntries is the most trackers the registry holds. When it is full,
	// adding one evicts the least recently used of the oldest few
	// trackers, preferring a healthy one, then one whose back-off has
	// elapsed. Zero or negative means DefaultMaxEntries; there is no
	// unbounded setting.
	MaxEntries int
	// IdleTTL is how long a tracker may go without a Get before the
	// registry forgets it, provided it is healthy or its back-off has
	// elapsed; a tracker still backing off is kept. Zero means
	// DefaultIdleTTL; negative turns idle eviction off.
	IdleTTL time.Duration
}

// Registry holds one Tracker per key, with bounded memory: at most
// MaxEntries trackers, and idle ones are forgotten. It is safe for
// concurrent use; every operation but Sweep costs O(1).
//
// Forgetting a healthy tracker loses nothing. Forgetting a failing one
// loses its fault count: the next Get for its key starts afresh. A caller
// holding a tracker that is evicted can go on using it, but the registry
// no longer sees it.
//
// Idle eviction is lazy: each Get examines a couple of the least recently
// used trackers and forgets those that have been idle for IdleTTL. Sweep
// does the same for all of them at once.
type Registry struct {
	tmpl Config
	max  int
	ttl  time.Duration

	mu      sync.Mutex
	entries map[string]*Tracker
	head    *Tracker // most recently used
	tail    *Tracker // least recently used
}

// NewRegistry returns an empty Registry configured by cfg.
func NewRegistry(cfg RegistryConfig) *Registry {
	r := &Registry{tmpl: cfg.Config, max: cfg.MaxEntries, ttl: cfg.IdleTTL}
	r.tmpl.Clock = clock.OrReal(cfg.Clock)
	if r.max <= 0 {
		r.max = DefaultMaxEntries
	}
	if r.ttl == 0 {
		r.ttl = DefaultIdleTTL
	}
	r.entries = make(map[string]*Tracker)
	return r
}

// Get returns the tracker for key, making a healthy one if there is none,
// and marks it used.
func (r *Registry) Get(key string) *Tracker {
	return r.get(key, r.name(key))
}

// Lookup returns the tracker for key without making one and without
// marking it used, and reports whether there was one.
func (r *Registry) Lookup(key string) (*Tracker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.entries[key]
	return t, ok
}

// Delete forgets the tracker for key, if any.
func (r *Registry) Delete(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.entries[key]; ok {
		r.remove(t)
	}
}

// forgetHealthy forgets the tracker for key if it is healthy.
func (r *Registry) forgetHealthy(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.entries[key]; ok && t.evictRank() == 0 {
		r.remove(t)
	}
}

// Len returns the number of trackers held.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Sweep forgets every tracker that has been idle for IdleTTL and is healthy
// or past its back-off, and returns how many it forgot. It costs O(Len).
func (r *Registry) Sweep() int {
	if r.ttl < 0 {
		return 0
	}
	now := r.tmpl.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for t := r.tail; t != nil; {
		prev := t.prev
		if now.Sub(t.used) >= r.ttl && t.evictRank() < 2 {
			r.remove(t)
			n++
		}
		t = prev
	}
	return n
}

func (r *Registry) name(key string) string {
	if r.tmpl.Name == "" {
		return key
	}
	return r.tmpl.Name + "/" + key
}

// get returns the tracker for key, making one named name if there is none.
func (r *Registry) get(key, name string) *Tracker {
	now := r.tmpl.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepSome(now)
	if t, ok := r.entries[key]; ok {
		r.touch(t, now)
		return t
	}
	for len(r.entries) >= r.max {
		r.evictOne()
	}
	cfg := r.tmpl
	cfg.Name = name
	t := New(cfg)
	t.key, t.used = key, now
	r.entries[key] = t
	r.pushFront(t)
	return t
}

// peek returns the tracker for key and marks it used, without making one.
func (r *Registry) peek(key string) (*Tracker, bool) {
	now := r.tmpl.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepSome(now)
	t, ok := r.entries[key]
	if ok {
		r.touch(t, now)
	}
	return t, ok
}

// sweepSome examines up to lazySweep idle trackers at the cold end of the
// list, forgetting those that may be forgotten and moving those still
// backing off to the hot end, so that they do not block the sweep. r.mu
// must be held.
func (r *Registry) sweepSome(now time.Time) {
	if r.ttl < 0 {
		return
	}
	for i := 0; i < lazySweep && r.tail != nil; i++ {
		t := r.tail
		if now.Sub(t.used) < r.ttl {
			return
		}
		if t.evictRank() < 2 {
			r.remove(t)
			continue
		}
		if t == r.head {
			return
		}
		r.unlink(t)
		r.pushFront(t) // t.used is kept: it stays idle
	}
}

// evictOne forgets one tracker to make room: of the evictWindow least
// recently used, the first healthy one, else the first past its back-off,
// else the least recently used. r.mu must be held.
func (r *Registry) evictOne() {
	victim, rank := r.tail, 3
	t := r.tail
	for i := 0; i < evictWindow && t != nil; i++ {
		if k := t.evictRank(); k < rank {
			victim, rank = t, k
			if k == 0 {
				break
			}
		}
		t = t.prev
	}
	if victim != nil {
		r.remove(victim)
	}
}

// touch marks t, which is in the list, used at now. r.mu must be held.
func (r *Registry) touch(t *Tracker, now time.Time) {
	t.used = now
	if r.head != t {
		r.unlink(t)
		r.pushFront(t)
	}
}

func (r *Registry) remove(t *Tracker) {
	r.unlink(t)
	delete(r.entries, t.key)
}

func (r *Registry) pushFront(t *Tracker) {
	t.prev, t.next = nil, r.head
	if r.head != nil {
		r.head.prev = t
	}
	r.head = t
	if r.tail == nil {
		r.tail = t
	}
}

func (r *Registry) unlink(t *Tracker) {
	if t.prev != nil {
		t.prev.next = t.next
	} else if r.head == t {
		r.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else if r.tail == t {
		r.tail = t.prev
	}
	t.prev, t.next = nil, nil
}
