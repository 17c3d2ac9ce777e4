package relay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/tracker"
)

// A message is singled out when the destination keeps failing it, with
// faults blamed on the destination, while it delivers other messages: a
// receiver that crashes on one payload and answers 500, a route that
// refuses one tenant. Seed 004 leaves open whether such a fault is the
// service's or its parameter's and leans towards the service; VISION
// blames the destination "when both are plausible". Once the destination
// has been seen delivering others around Destination.SingledOutAfter of
// this message's faults, an outage is no longer plausible, and its faults
// are charged to it: without that, it was retried uncharged for ever
// (about once a second, the destination's back-off being reset by every
// other success), held its strict stream for good, and never reached the
// dead-letter queue.
//
// Each relay keeps its own count, in memory (a bounded tracker.Registry
// keyed by destination and message): a message another relay of the fleet
// takes starts again there, which delays the charge and never hastens it.

const (
	// DefaultSingledOutAfter is Destination.SingledOutAfter's default.
	DefaultSingledOutAfter = 15 * time.Minute
	// singledOutFaults is the fewest faults, each met while the
	// destination was delivering others, that single a message out.
	singledOutFaults = 5
)

// newSingledOut returns the registry of messages' trackers: each counts
// the faults of one message at one destination met while the destination
// was healthy, and paces that message's retries (1 s doubling to 5 min),
// apart from the destination's own back-off.
func newSingledOut(c *Config) *tracker.Registry {
	return tracker.NewRegistry(tracker.RegistryConfig{Config: tracker.Config{
		Name: "message", Clock: c.Clock, Logger: c.Logger,
		ReportAfterFaults: -1, // the relay reports the charge itself
	}})
}

func singledOutKey(d *destination, m *outbox.Message) string {
	return d.name + "/" + m.ID.String()
}

// singledOut records a fault of m blamed on d and returns the message's
// own back-off and, when the fault is to be charged to m, the error to
// record (nil otherwise). svcHealthy is whether d's tracker was healthy
// before this fault: the last outcome it saw was a success.
func (r *Relay) singledOut(d *destination, m *outbox.Message, svcHealthy bool, last error) (wait time.Duration, charge error) {
	if d.singledOutAfter < 0 {
		return 0, nil
	}
	key := singledOutKey(d, m)
	t, ok := r.singled.Lookup(key)
	if !svcHealthy {
		// The destination is failing other messages too: this fault is
		// its own, not the message's.
		if !ok {
			return 0, nil
		}
		return t.Token().Remaining(), nil
	}
	t = r.singled.Get(key)
	tok := t.Fault()
	faults, since := t.Faults(), t.FailingSince()
	span := r.clk.Now().Sub(since)
	if faults < singledOutFaults || span < d.singledOutAfter {
		return tok.Remaining(), nil
	}
	err := fmt.Errorf("singled out: destination %s failed this message %d times over %s while delivering others, so the fault is charged to the message: %w",
		d.name, faults, span.Round(time.Second), last)
	r.log.LogAttrs(r.stopCtx, slog.LevelWarn, "message singled out: the destination fails it while delivering others; its faults are charged as attempts",
		slog.String("message_id", m.ID.String()), slog.String("destination", d.name), slog.String("stream", m.Stream),
		slog.Int("faults", faults), slog.Duration("failing_for", span), slog.String("error", outbox.TruncateError(last.Error())))
	return 0, err
}

// deliveredSingled forgets m's tracker at d once m is delivered.
func (r *Relay) deliveredSingled(d *destination, m *outbox.Message) {
	// Every delivery comes here: with no message failing (the registry
	// empty), no key is built.
	if d.singledOutAfter < 0 || r.singled.Len() == 0 {
		return
	}
	r.singled.Delete(singledOutKey(d, m))
}
