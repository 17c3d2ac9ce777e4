package tracker

import (
	"context"
	"math"
	"time"

	"github.com/backstophq/backstop/clock"
)

// Forever is the Deadline of a RetryToken that never expires. It lies so far
// in the future that no clock reaches it.
var Forever = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// RetryToken is the end of a back-off period: the moment from which an
// operation may be tried again.
//
// A token is an immutable value, safe to copy and to share between
// goroutines. It is a snapshot: a later Fault or Success on the tracker that
// issued it does not change it. Its zero value is usable and has already
// expired (its clock is the wall clock).
//
// Tokens compose. A service and its parameter combine with And: the result
// expires when both have. A set of independent services combine with Or:
// the result expires when any of them has. Compositions nest freely, so
// (a AND b) OR c is a.And(b).Or(c). A token that never expires (see Never)
// is the identity of Or and absorbs And: Never AND x never expires, and
// Never OR x is x.
type RetryToken struct {
	clk      clock.Clock // nil means clock.Real
	deadline time.Time
	never    bool
}

// NewRetryToken returns a token on clock c (nil means the wall clock) that
// expires at deadline. A zero deadline gives a token that has already
// expired.
func NewRetryToken(c clock.Clock, deadline time.Time) RetryToken {
	if !deadline.Before(Forever) {
		return RetryToken{clk: c, never: true}
	}
	return RetryToken{clk: c, deadline: deadline}
}

// Never returns a token on clock c (nil means the wall clock) that never
// expires. Its Wait returns only when its context is done.
func Never(c clock.Clock) RetryToken {
	return RetryToken{clk: c, never: true}
}

func (t RetryToken) clock() clock.Clock { return clock.OrReal(t.clk) }

// Expired reports whether the back-off period has ended, that is whether
// the clock has reached the deadline. It is always false for a token that
// never expires.
func (t RetryToken) Expired() bool {
	if t.never {
		return false
	}
	if t.deadline.IsZero() {
		return true
	}
	return !t.clock().Now().Before(t.deadline)
}

// Never reports whether the token never expires, which is the case when
// the retry strategy said to stop.
func (t RetryToken) Never() bool { return t.never }

// Deadline returns the moment the token expires: the zero Time for a zero
// token, Forever for a token that never expires.
func (t RetryToken) Deadline() time.Time {
	if t.never {
		return Forever
	}
	return t.deadline
}

// Remaining returns how long until the token expires: zero once it has,
// the largest Duration for a token that never expires.
func (t RetryToken) Remaining() time.Duration {
	if t.never {
		return time.Duration(math.MaxInt64)
	}
	if t.deadline.IsZero() {
		return 0
	}
	if d := t.deadline.Sub(t.clock().Now()); d > 0 {
		return d
	}
	return 0
}

// Wait blocks until the token expires or ctx is done, whichever comes
// first, on the token's clock. It returns nil at once when the token has
// expired, and ctx.Err() when ctx ends the wait. A token that never expires
// waits for ctx alone.
func (t RetryToken) Wait(ctx context.Context) error {
	if t.Expired() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.never {
		<-ctx.Done()
		return ctx.Err()
	}
	c := t.clock()
	timer := c.NewTimer(t.deadline.Sub(c.Now()))
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		timer.Stop()
		return ctx.Err()
	}
}

// And returns a token that expires when both t and other have: the later
// of the two deadlines. It never expires when either never does. The result
// runs on t's clock, or other's when t has none.
func (t RetryToken) And(other RetryToken) RetryToken {
	c := t.clk
	if c == nil {
		c = other.clk
	}
	if t.never || other.never {
		return RetryToken{clk: c, never: true}
	}
	d := t.deadline
	if other.deadline.After(d) {
		d = other.deadline
	}
	return RetryToken{clk: c, deadline: d}
}

// Or returns a token that expires when either t or other has: the earlier
// of the two deadlines. A token that never expires does not count, so
// Never OR x is x. The result runs on t's clock, or other's when t has
// none.
func (t RetryToken) Or(other RetryToken) RetryToken {
	c := t.clk
	if c == nil {
		c = other.clk
	}
	switch {
	case t.never && other.never:
		return RetryToken{clk: c, never: true}
	case t.never:
		return RetryToken{clk: c, deadline: other.deadline}
	case other.never:
		return RetryToken{clk: c, deadline: t.deadline}
	}
	d := t.deadline
	if other.deadline.Before(d) {
		d = other.deadline
	}
	return RetryToken{clk: c, deadline: d}
}

// All returns the AND of tokens: a token that expires when every one of
// them has. All of no tokens has already expired.
func All(tokens ...RetryToken) RetryToken {
	var out RetryToken
	for _, t := range tokens {
		out = out.And(t)
	}
	return out
}

// Any returns the OR of tokens: a token that expires when any one of them
// has. Any of no tokens never expires, since nothing can release it; it
// runs on the wall clock.
func Any(tokens ...RetryToken) RetryToken {
	out := RetryToken{never: true}
	for _, t := range tokens {
		out = out.Or(t)
	}
	return out
}
