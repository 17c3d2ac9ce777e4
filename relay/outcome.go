package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// kind is what an outcome does to its message.
type kind int

const (
	delivered kind = iota // a Completion with Published
	failed                // a Failure: an attempt charged
	released              // a Release: no attempt charged
)

// Why a message was released, for logs and the released_total metric.
const (
	causeDestination = "destination_fault"
	causeBreaker     = "breaker_open"
	causeCascade     = "cascade"
	causeShutdown    = "shutdown"
	causeLeaseLapsed = "lease_lapsed"   // not started: its lease had lapsed
	causeReclaimed   = "reclaimed"      // a second lease on a message in flight, given back
	causeStall       = "stall"          // the relay stalled during the attempt
	causePaused      = "paused"         // not started: the destination asked to wait (Retry-After)
	causeOverBudget  = "prefetch_bytes" // not started: claimed past PrefetchBytes, given back
	causeElsewhere   = "elsewhere"      // the transport left it to another process (transport.Elsewhere)
)

// outcome is the result of one message, as a worker reports it.
type outcome struct {
	m    *outbox.Message
	dest *destination // nil for an unconfigured destination
	kind kind

	completed outbox.Status // steps completed (partial completion)
	after     time.Duration // released: when it is due again
	cause     string        // released: why
	err       error         // the delivery error; nil when delivered
	v         errorhandling.Classification
	permanent bool
	// recorded, when set, is called once, on the recorder's goroutine,
	// with whether the store recorded the outcome (true) or not (false:
	// the call failed, the store refused it, or the lease it ends was
	// lost). The next message of a strictly ordered stream waits for it.
	recorded func(ok bool)
}

// errorText is the text recorded with the message.
func (o *outcome) errorText() string {
	if o.err == nil {
		return ""
	}
	return o.err.Error()
}

// addTo adds the outcome's store record to b.
func (o *outcome) addTo(b *store.Batch) {
	switch o.kind {
	case delivered:
		b.Completions = append(b.Completions, store.Completion{ID: o.m.ID, Status: outbox.StatusPublished | o.completed})
	case failed:
		b.Failures = append(b.Failures, store.Failure{
			ID: o.m.ID, CompletedStatus: o.completed, Error: o.errorText(), Reason: o.v.Reason,
			Fingerprint: errorhandling.Fingerprint(o.err), Permanent: o.permanent, RetryAfter: o.v.RetryAfter,
		})
	case released:
		b.Releases = append(b.Releases, store.Release{ID: o.m.ID, After: o.after, CompletedStatus: o.completed, Error: o.errorText()})
	}
}

// decide turns the end of a delivery attempt into an outcome. last is the
// error of the last try (nil when it succeeded); tries is how many were
// made.
func (r *Relay) decide(d *destination, m *outbox.Message, last error, completed outbox.Status, tries int) outcome {
	o := outcome{m: m, dest: d, completed: completed, err: last}
	switch {
	case tries > 0 && last == nil:
		o.kind = delivered
		if t, ok := r.trackers.Lookup(d.name); ok {
			t.Success()
		}
		r.deliveredSingled(d, m)
		return o
	case tries == 0 || (r.deliverCtx.Err() != nil && errors.Is(last, context.Canceled)):
		// Shutdown cancelled the attempt: nobody is to blame.
		o.kind, o.cause = released, causeShutdown
		return o
	}
	o.v = r.classify(last)
	o.v.RetryAfter = boundRetryAfter(o.v.RetryAfter)
	switch {
	case o.v.Retryable && o.v.Blame == errorhandling.BlameDestination:
		svc := r.trackers.Get(d.name)
		// A destination out of room (a full queue taking a message now
		// and then) fails a message for its own state, never for the
		// message: counted from its successes, such faults singled out
		// and dead-lettered messages of a congested destination.
		var own time.Duration
		var charge error
		if !errors.Is(last, transport.ErrNoRoom) {
			own, charge = r.singledOut(d, m, svc.Healthy(), last)
		}
		if charge != nil {
			o.kind, o.err = failed, charge
			o.v.Blame = errorhandling.BlameMessage
			return o
		}
		tok := svc.FaultRetryAfter(o.v.RetryAfter)
		o.kind, o.cause = released, causeDestination
		// The tracker paces retries; its back-off is capped at the
		// breaker's Timeout, and at the next probe while the circuit is
		// open, since the open circuit keeps the relay off the destination
		// anyway and a long back-off would only delay the messages once
		// it has recovered.
		now := r.clk.Now()
		limit := d.openFor
		if d.isOpen() || d.breaker.State() == circuitbreaker.StateOpen {
			limit = min(limit, max(d.untilProbeAt(now), d.firstProbe))
		}
		o.after = max(min(max(tok.Remaining(), own), limit, maxRelease), o.v.RetryAfter, minRelease)
		if o.v.RetryAfter > 0 {
			// Retry-After speaks for the destination, not the message.
			d.pause(now.Add(o.v.RetryAfter))
			r.fleetPaused(d, o.v.RetryAfter)
			r.wake()
		}
		r.logAttempt(slog.LevelDebug, "destination fault; message released", &o,
			slog.Duration("retry_in", o.after))
	case o.v.Retryable:
		o.kind = failed
	default:
		o.kind, o.permanent = failed, true
		if o.v.Class == errorhandling.ClassUnknown {
			r.logAttempt(slog.LevelWarn, "unclassified error; treated as permanent", &o,
				slog.String("error_type", errorTypes(last)))
		}
	}
	return o
}

// Bounds of the delay of a message released after a destination fault.
const (
	minRelease = time.Millisecond
	maxRelease = time.Hour
)

// maxRetryAfter caps the retry-after hint of a delivery error at the
// longest pause the store keeps (store.MaxPause, an hour, as the webhook
// transport caps a Retry-After header): a Go handler's hint of ten years
// would otherwise pause the destination for the whole fleet for ten
// years.
const maxRetryAfter = store.MaxPause

// boundRetryAfter returns a delivery error's retry-after hint within
// [0, maxRetryAfter]. A negative hint means none: the store refuses a
// failure carrying one, and the message's attempt would never be charged.
func boundRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), maxRetryAfter)
}

// rejected is the outcome of a message the breaker would not let through.
func (r *Relay) rejected(d *destination, m *outbox.Message) outcome {
	// Until the next probe, by when the circuit may have closed; the
	// claimer does not claim for the destination meanwhile.
	after := max(d.untilProbeAt(r.clk.Now()), minRelease)
	d.stats.rejected.Add(1)
	r.stats.rejected.Add(1)
	o := outcome{m: m, dest: d, kind: released, after: after, cause: causeBreaker}
	r.logAttempt(slog.LevelDebug, "breaker open; message released", &o, slog.Duration("retry_in", after))
	return o
}

// held is the outcome of a message not sent because its destination is
// paused (a Retry-After) for wait more: released until then, no attempt
// charged, nothing told to the breaker.
func (r *Relay) held(d *destination, m *outbox.Message, wait time.Duration) outcome {
	o := outcome{m: m, dest: d, kind: released, after: max(min(wait, maxRelease), minRelease), cause: causePaused}
	r.logAttempt(slog.LevelDebug, "destination paused; message released", &o, slog.Duration("retry_in", o.after))
	return o
}

// leftElsewhere is the outcome of a message the transport left to
// another process (transport.Elsewhere): released until after, no
// attempt charged, nothing told to the breaker or the tracker. The
// transport says why at its own level; last is kept as the message's
// error, for the operator tools.
func (r *Relay) leftElsewhere(d *destination, m *outbox.Message, last error, completed outbox.Status, after time.Duration) outcome {
	o := outcome{m: m, dest: d, kind: released, after: max(min(after, maxRelease), minRelease), cause: causeElsewhere,
		completed: completed, err: last}
	r.logAttempt(slog.LevelDebug, "left to another instance; message released", &o, slog.Duration("retry_in", o.after))
	return o
}

// unknownDestination is the outcome of a message for a destination that is
// not configured: dead-lettered at once.
func (r *Relay) unknownDestination(m *outbox.Message) outcome {
	err := errorhandling.WithReason(errorhandling.Permanent(fmt.Errorf("destination %q is not configured", m.Destination)),
		errorhandling.ReasonValidationFailure)
	return outcome{
		m: m, kind: failed, permanent: true, err: err,
		v: errorhandling.Classification{Class: errorhandling.ClassPermanent, Blame: errorhandling.BlameMessage,
			Reason: errorhandling.ReasonValidationFailure},
	}
}

// cascade gives back, undelivered, the messages behind a failure in a
// strictly ordered stream, or behind a delivery whose recording failed
// (seed 000's Status=0 release).
func cascade(d *destination, later []*outbox.Message) []outcome {
	outs := make([]outcome, len(later))
	for i, m := range later {
		outs[i] = outcome{m: m, dest: d, kind: released, cause: causeCascade}
	}
	return outs
}

// logAttempt logs a record about one message with the stable keys.
func (r *Relay) logAttempt(level slog.Level, msg string, o *outcome, extra ...slog.Attr) {
	ctx := context.Background()
	if !r.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("message_id", o.m.ID.String()),
		slog.String("destination", o.m.Destination),
		slog.String("stream", o.m.Stream),
		slog.Int("attempt", o.m.Attempts+1),
	}
	if o.err != nil {
		attrs = append(attrs,
			slog.String("class", o.v.Class.String()),
			slog.String("blame", o.v.Blame.String()),
			slog.String("reason", o.v.Reason.String()),
			slog.String("fingerprint", errorhandling.Fingerprint(o.err)),
			slog.String("error", outbox.TruncateError(o.err.Error())))
	}
	r.log.LogAttrs(ctx, level, msg, append(attrs, extra...)...)
}

// errorTypes names the Go types along err's chain, outermost first, such
// as "*fmt.wrapError > *errors.errorString", for someone to write a rule.
func errorTypes(err error) string {
	var types []string
	for i := 0; err != nil && i < 8; i++ {
		types = append(types, fmt.Sprintf("%T", err))
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			err = nil
			if len(errs) > 0 {
				err = errs[0]
			}
		default:
			err = nil
		}
	}
	return strings.Join(types, " > ")
}
