package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/store"
)

// callGrowEvery is how long a halved call size holds, while calls of that
// size succeed, before it doubles again. A database whose statement_timeout
// cuts a claim of 4,096 rows but not one of 2,048 costs one failed call in
// this time, and a relay back from a slow spell needs about twelve of them
// to claim 4,096 again.
const callGrowEvery = 10 * time.Second

// callSize caps the rows one kind of store call touches (a claim with its
// renewals, a recording) after the database cancelled one for running too
// long (store.ErrTimedOut): a statement_timeout shorter than a claim of
// the relay's usual size would otherwise fail that claim every time, and
// the relay would never deliver again. Each timeout halves the cap, unless
// the call was under half the cap (or of max, uncapped) and one as large
// succeeded within callGrowEvery: the database was slow for a moment,
// whatever the size (on a loaded machine a 40 ms timeout struck claims of
// 3 rows between claims of 54, and halving for each brought the claims
// down to one row). A call near the cap that times out now and then
// halves it, so that calls leave a margin. Each callGrowEvery of calls
// that succeed at the cap doubles it, until it is lifted. Only one
// goroutine touches a callSize.
type callSize struct {
	what  string // "claim" or "record", for the log
	max   int    // the size the relay uses without a cap
	limit int    // the cap; 0: none
	since time.Time
	// ok is the largest call that succeeded since okAt, a window of
	// callGrowEvery at most.
	ok   int
	okAt time.Time
	// warned says the relay has said once, at WARN, that a call timed
	// out: shared by the claimer's and the recorder's, so it says it once.
	warned *atomic.Bool
	log    *slog.Logger
}

// fit is n, capped.
func (c *callSize) fit(n int) int {
	if c.limit > 0 {
		return min(n, c.limit)
	}
	return n
}

// timedOutErr reports whether err says the call ran too long for the
// database or for its deadline (store.ErrTimedOut), ctx being still live.
func timedOutErr(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, store.ErrTimedOut) || errors.Is(err, context.DeadlineExceeded))
}

// timedOut takes a call of n rows that timed out at now, and reports
// whether the cap shrank: a smaller call is worth making at once. At one
// row it cannot shrink, and the caller backs off as for any failure.
func (c *callSize) timedOut(now time.Time, n int, err error) bool {
	ref := c.limit
	if ref == 0 {
		ref = c.max
	}
	if n <= 1 || (n < ref/2 && n <= c.ok && now.Sub(c.okAt) < callGrowEvery) {
		return false
	}
	capped := c.limit > 0
	c.limit = max(n/2, 1)
	c.since = now
	level := slog.LevelDebug
	switch {
	case c.warned.CompareAndSwap(false, true):
		level = slog.LevelWarn
	case !capped:
		level = slog.LevelInfo
	}
	c.log.LogAttrs(context.Background(), level,
		"the database cancelled a store call that ran too long (its statement_timeout, or the call's own limit); the relay makes smaller calls, and larger ones again while they succeed",
		slog.String("call", c.what), slog.Int("rows", n), slog.Int("next_rows", c.limit),
		slog.Duration("call_timeout", storeCallTimeout), slog.String("error", err.Error()))
	return true
}

// succeeded takes a call of n rows that succeeded at now: one at the cap
// that has held callGrowEvery doubles it, or lifts it at max.
func (c *callSize) succeeded(now time.Time, n int) {
	if now.Before(c.since) {
		c.since = now // the clock went back
	}
	if now.Before(c.okAt) || now.Sub(c.okAt) >= callGrowEvery {
		c.ok, c.okAt = n, now
	} else {
		c.ok = max(c.ok, n)
	}
	if c.limit == 0 || n < c.limit || now.Sub(c.since) < callGrowEvery {
		return
	}
	c.limit *= 2
	c.since = now
	if c.limit >= c.max {
		c.limit = 0
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "store calls back to their full size",
			slog.String("call", c.what), slog.Int("rows", c.max))
	}
}
