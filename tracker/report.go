package tracker

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Event says what a Report is about.
type Event int

// The events a tracker reports.
const (
	// EventThreshold: the tracker's failing stretch crossed its reporting
	// threshold (fault count or failing time). Reported once per stretch.
	EventThreshold Event = iota + 1
	// EventRecovered: a tracker that reported EventThreshold recorded a
	// Success. A stretch that never crossed the threshold recovers
	// silently.
	EventRecovered
)

// String returns "threshold" or "recovered".
func (e Event) String() string {
	switch e {
	case EventThreshold:
		return "threshold"
	case EventRecovered:
		return "recovered"
	}
	return fmt.Sprintf("event(%d)", int(e))
}

// The messages a tracker logs at WARN, one per Event.
const (
	MsgThreshold = "tracker threshold crossed"
	MsgRecovered = "tracker recovered"
)

// Report is what a tracker tells the operations log, and Config.OnReport,
// about one failing stretch.
//
// The log record of EventThreshold carries the keys "tracker" (Tracker),
// "faults", "failing_for" (a duration) and "next_try" (the time the
// back-off ends, or the string "never" when the strategy said stop). That
// of EventRecovered carries "tracker", "faults" and "failed_for".
type Report struct {
	// Event says whether the stretch crossed the threshold or recovered.
	Event Event
	// Tracker is the tracker's name.
	Tracker string
	// Faults is the consecutive fault count: at the crossing, or in all
	// for a recovery.
	Faults int
	// FailingSince is when the first fault of the stretch was recorded.
	FailingSince time.Time
	// FailingFor is the time from FailingSince to the report.
	FailingFor time.Duration
	// NextTry is the back-off at the time of the report; expired for a
	// recovery.
	NextTry RetryToken
}

// checkThreshold reports whether the current failing stretch has just
// crossed the reporting threshold, marking it reported, and returns the
// report to emit. t.mu must be held.
func (t *Tracker) checkThreshold() (Report, bool) {
	if t.reported || t.faults == 0 {
		return Report{}, false
	}
	failingFor := t.clk.Now().Sub(t.since)
	byCount := t.afterFaults > 0 && t.faults >= t.afterFaults
	byTime := t.afterDur > 0 && failingFor >= t.afterDur
	if !byCount && !byTime {
		return Report{}, false
	}
	t.reported = true
	return Report{
		Event:        EventThreshold,
		Tracker:      t.name,
		Faults:       t.faults,
		FailingSince: t.since,
		FailingFor:   failingFor,
		NextTry:      t.token,
	}, true
}

// emit logs r at WARN and passes it to the OnReport hook. It must be
// called without t.mu held.
func (t *Tracker) emit(r Report) {
	switch r.Event {
	case EventThreshold:
		t.log().LogAttrs(context.Background(), slog.LevelWarn, MsgThreshold,
			slog.String("tracker", r.Tracker),
			slog.Int("faults", r.Faults),
			slog.Duration("failing_for", r.FailingFor),
			nextTry(r.NextTry))
	case EventRecovered:
		t.log().LogAttrs(context.Background(), slog.LevelWarn, MsgRecovered,
			slog.String("tracker", r.Tracker),
			slog.Int("faults", r.Faults),
			slog.Duration("failed_for", r.FailingFor))
	}
	if t.onReport != nil {
		t.onReport(r)
	}
}

// debugFault logs a fault that did not cross the threshold, at DEBUG.
func (t *Tracker) debugFault(faults int, tok RetryToken) {
	l := t.log()
	ctx := context.Background()
	if !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.LogAttrs(ctx, slog.LevelDebug, "tracker fault",
		slog.String("tracker", t.name),
		slog.Int("faults", faults),
		nextTry(tok))
}

func nextTry(tok RetryToken) slog.Attr {
	if tok.Never() {
		return slog.String("next_try", "never")
	}
	return slog.Time("next_try", tok.Deadline())
}

func (t *Tracker) log() *slog.Logger {
	if t.logger != nil {
		return t.logger
	}
	return slog.Default()
}
