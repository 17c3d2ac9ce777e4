package config

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/transport"
)

// concurrency is the destination's Concurrency for the relay, given the
// relay's workers (0: relay.DefaultWorkers). With a rate limit and no
// concurrency set, it is as many deliveries as get a token within their
// timeout, waiting their turn: ceil(per_second × timeout) - 1, at least 1
// and at most workers. More would only wait and end as timeouts of the
// destination, which its breaker counts: with per_second 0.5 and the
// defaults, 16 deliveries took turns at one token every 2 s, each waiting
// about 32 s with a 30 s timeout, and the timeouts counted against a
// destination that had failed nothing.
func (d *Destination) concurrency(workers int) int {
	if d.Concurrency != 0 || d.RateLimit == nil {
		return d.Concurrency
	}
	if workers == 0 {
		workers = relay.DefaultWorkers
	}
	timeout := d.Timeout.D()
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	n := math.Ceil(d.RateLimit.PerSecond*timeout.Seconds()) - 1
	return int(max(1, min(float64(workers), n)))
}

// rateLimited starts at most perSecond deliveries a second, with bursts of
// burst: a token bucket. A delivery waits for a token or its context, and
// one that gives up takes none: tokens are taken when due, never booked
// ahead. Booked ahead, each delivery that timed out waiting kept its
// booking, so that a limit slower than Concurrency deliveries per Timeout
// pushed the next token further off with every attempt, and after the
// first timeouts no delivery started again.
type rateLimited struct {
	transport.Transport
	clk      clock.Clock
	interval time.Duration // between tokens
	full     time.Duration // burst-1 intervals: how far next may lag now

	mu   sync.Mutex
	next time.Time // when the next token is due; in the past while the bucket holds more
	seen time.Time // the latest reading of clk
}

func newRateLimited(t transport.Transport, perSecond float64, burst int, clk clock.Clock) *rateLimited {
	interval := time.Duration(float64(time.Second) / perSecond)
	full := time.Duration(math.MaxInt64)
	if n := int64(burst - 1); n < int64(math.MaxInt64/interval) {
		full = time.Duration(n) * interval
	}
	return &rateLimited{Transport: t, clk: clock.OrReal(clk), interval: interval, full: full}
}

func (r *rateLimited) Deliver(ctx context.Context, m *outbox.Message) error {
	if err := r.wait(ctx); err != nil {
		return errorhandling.Transient(fmt.Errorf("rate limit: %w", err))
	}
	return r.Transport.Deliver(ctx, m)
}

// wait takes a token, waiting for one to come due, or returns ctx's error.
func (r *rateLimited) wait(ctx context.Context) error {
	for {
		d := r.take()
		if d <= 0 {
			return nil
		}
		t := r.clk.NewTimer(d)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// take takes a token when one is due, returning 0, and otherwise returns
// how long until one is (another waiter may take it first).
func (r *rateLimited) take() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	if now.Before(r.seen) {
		// The clock was stepped back: the schedule moves with it, so
		// that the step neither holds deliveries for its length nor
		// frees tokens the limit did not allow. (The wall clock's
		// monotonic reading never goes back; other clocks may.)
		r.next = r.next.Add(now.Sub(r.seen))
	}
	r.seen = now
	// A bucket left idle fills to burst tokens, and no more: a clock
	// stepped forward a day is an idle day.
	if now.Sub(r.next) > r.full {
		r.next = now.Add(-r.full)
	}
	if d := r.next.Sub(now); d > 0 {
		return d
	}
	r.next = r.next.Add(r.interval)
	return 0
}
