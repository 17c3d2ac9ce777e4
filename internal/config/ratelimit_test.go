package config

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
)

var rateEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// steppedClock is a fake clock whose Now can be stepped back, as an NTP
// correction steps a host's clock; clock.Fake only goes forward. Its
// timers run on the fake clock's time, as the wall clock's timers run on
// the monotonic clock.
type steppedClock struct {
	*clock.Fake
	back atomic.Int64
}

func (c *steppedClock) Now() time.Time { return c.Fake.Now().Add(-time.Duration(c.back.Load())) }

// waitIn starts r.wait on ctx and returns the channel of its result.
func waitIn(ctx context.Context, r *rateLimited) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.wait(ctx) }()
	return done
}

// TestRateLimitTakesNoTokenForADeliveryThatGaveUp: one delivery a second,
// five deliveries waiting for a token give up (their timeout), then
// another comes. It must start on the next second: the five took nothing.
// Each had booked a second of its own, so the sixth waited five, and with
// more deliveries timing out than the limit lets through, the bookings ran
// ahead of every timeout and no delivery started again.
func TestRateLimitTakesNoTokenForADeliveryThatGaveUp(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(rateEpoch)
	r := newRateLimited(nil, 1, 1, clk)
	ctx := context.Background()
	if err := r.wait(ctx); err != nil {
		t.Fatal(err)
	}
	gaveUp, cancel := context.WithCancel(ctx)
	var waiting []<-chan error
	for range 5 {
		waiting = append(waiting, waitIn(gaveUp, r))
	}
	clk.WaitForTimers(5, nil)
	cancel()
	for _, w := range waiting {
		if err := <-w; err == nil {
			t.Fatal("a wait returned a token after its context ended")
		}
	}
	next := waitIn(ctx, r)
	clk.WaitForTimers(1, nil)
	if at, _ := clk.NextDeadline(); at.Sub(clk.Now()) > time.Second {
		t.Fatalf("the next token is due in %v at one a second: the deliveries that gave up took theirs", at.Sub(clk.Now()))
	}
	clk.Advance(time.Second)
	if err := <-next; err != nil {
		t.Fatal(err)
	}
}

// TestRateLimitAcrossClockSteps: a wall clock stepped back an hour must
// not hold deliveries for the hour, nor give a token the limit did not
// allow; stepped forward a day, it frees burst tokens and no more.
func TestRateLimitAcrossClockSteps(t *testing.T) {
	t.Parallel()
	t.Run("back an hour", func(t *testing.T) {
		clk := &steppedClock{Fake: clock.NewFake(rateEpoch)}
		r := newRateLimited(nil, 1, 1, clk)
		if d := r.take(); d != 0 {
			t.Fatalf("the first token waits %v", d)
		}
		clk.back.Store(int64(time.Hour))
		if d := r.take(); d <= 0 || d > time.Second {
			t.Fatalf("just after a token, stepped back an hour: the next waits %v, want within (0, 1s]", d)
		}
		done := waitIn(context.Background(), r)
		clk.WaitForTimers(1, nil)
		clk.Advance(time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("forward a day", func(t *testing.T) {
		clk := clock.NewFake(rateEpoch)
		r := newRateLimited(nil, 2, 3, clk)
		for range 3 {
			if d := r.take(); d != 0 {
				t.Fatalf("a token of the first burst waits %v", d)
			}
		}
		clk.Advance(24 * time.Hour)
		n := 0
		for r.take() == 0 {
			n++
			if n > 100 {
				break
			}
		}
		if n != 3 {
			t.Fatalf("a day on, %d tokens at once, want the burst (3)", n)
		}
	})
}

// TestRateLimitOfHugeBurst: a burst so large that its intervals overflow a
// time.Duration is a bucket that never empties, not a negative one.
func TestRateLimitOfHugeBurst(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(rateEpoch)
	r := newRateLimited(nil, MinRatePerSecond, 1<<40, clk)
	for range 1000 {
		if d := r.take(); d != 0 {
			t.Fatalf("a bucket of 2^40 tokens ran dry: wait %v", d)
		}
	}
}

// TestRateLimitedConcurrency: a rate-limited destination with no
// concurrency set runs only as many deliveries as get a token within
// their timeout. With the workers' 16, at 0.5 a second and a 30 s timeout
// each delivery waited about 32 s for its turn and ended as a timeout of
// the destination, counted by its breaker.
func TestRateLimitedConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dest string
		want int
	}{
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 0.5}}", 14},
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 0.1}, timeout: 60s}", 5},
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 0.001}}", 1},
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 50}}", 16},
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 0.1}, concurrency: 8}", 8},
		{"{name: h, type: webhook, url: 'http://x/y'}", 0},
	} {
		c, err := Parse([]byte("destinations:\n  - "+tc.dest+"\n"), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		rc, trs, err := c.RelayConfig(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		trs[0].Close()
		if got := rc.Destinations["h"].Concurrency; got != tc.want {
			t.Errorf("%s: concurrency %d, want %d", tc.dest, got, tc.want)
		}
	}
}
