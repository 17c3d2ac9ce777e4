package store

import (
	"context"
	"sync"
)

// Hub fans wake-ups out to subscribers. Stores use it to implement
// Notifier: they call Notify after a change that may make messages
// claimable. The zero value is ready to use and safe for concurrent use.
type Hub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Subscribe implements Notifier. Each subscriber's channel holds at most
// one pending wake-up, so a slow reader sees one wake-up for many
// notifications and never blocks Notify.
func (h *Hub) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[chan struct{}]struct{})
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	go func() {
		<-ctx.Done()
		h.mu.Lock()
		delete(h.subs, ch)
		close(ch)
		h.mu.Unlock()
	}()
	return ch, nil
}

// Notify wakes every subscriber.
func (h *Hub) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
