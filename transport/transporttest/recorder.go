package transporttest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/backstophq/backstop/outbox"
)

// Recorder is an in-memory Receiver: the destination side of a harness
// calls Record for every message it receives, and the suite reads them
// with Received. The zero value is not usable; call NewRecorder. It is
// safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	got     []Delivery
	changed chan struct{} // closed and replaced on every Record
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{changed: make(chan struct{})}
}

// Record stores one delivery and wakes every waiting Received. It keeps
// its own copies of d's payload and headers.
func (r *Recorder) Record(d Delivery) {
	d.Payload = bytes.Clone(d.Payload)
	d.Headers = maps.Clone(d.Headers)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, d)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Received waits until at least n deliveries have been recorded or ctx is
// done, and returns copies of all of them in the order recorded. When ctx
// is done first, the error wraps ctx.Err() and says how many arrived.
func (r *Recorder) Received(ctx context.Context, n int) ([]Delivery, error) {
	for {
		r.mu.Lock()
		got, changed := r.snapshot(), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, fmt.Errorf("transporttest: %d of %d deliveries arrived: %w", len(got), n, ctx.Err())
		}
	}
}

// Len returns the number of deliveries recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *Recorder) snapshot() []Delivery {
	out := make([]Delivery, len(r.got))
	for i, d := range r.got {
		d.Payload = bytes.Clone(d.Payload)
		d.Headers = maps.Clone(d.Headers)
		out[i] = d
	}
	return out
}

// FromMessage returns the Delivery that m stands for, as an in-process
// destination (a transport.Func) records it.
func FromMessage(m *outbox.Message) Delivery {
	return Delivery{
		ID:      m.ID.String(),
		Stream:  m.Stream,
		Type:    m.Type,
		Payload: bytes.Clone(m.Payload),
		Headers: maps.Clone(m.Headers),
	}
}
