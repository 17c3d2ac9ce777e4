package rabbitmq

import (
	"sync"
	"time"
)

// roomMemory is how long the transport remembers the largest body a
// routing key took.
const roomMemory = time.Hour

// maxRoomKeys bounds the routing keys remembered; past it the memory
// starts again empty.
const maxRoomKeys = 4096

// room remembers, per routing key, the largest body the broker confirmed
// within the last roomMemory. A nack carries no reason; when the message
// is no larger than a body its key took, it is not over any queue's
// x-max-length-bytes, so the queue refused it for lack of room.
type room struct {
	mu   sync.Mutex
	took map[string]took
}

type took struct {
	size int
	at   time.Time
}

// confirmed records that key took a body of size bytes.
func (r *room) confirmed(key string, size int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.took == nil || len(r.took) >= maxRoomKeys {
		r.took = make(map[string]took)
	}
	if t, ok := r.took[key]; ok && t.size > size && now.Sub(t.at) < roomMemory {
		return
	}
	r.took[key] = took{size: size, at: now}
}

// largest returns the largest body key took within the last roomMemory,
// or -1.
func (r *room) largest(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.took[key]
	if !ok || time.Since(t.at) >= roomMemory {
		return -1
	}
	return t.size
}
