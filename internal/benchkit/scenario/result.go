package scenario

import (
	"time"
)

// Result is what one case measured, written by the child process as JSON.
type Result struct {
	// Case is the case's name, store/scenario/system.
	Case string `json:"case"`
	// Rate is the case's headline figure in messages per second: rows
	// written (enqueue), drained (drain), completed (insert-and-work) or
	// delivered (latency).
	Rate float64 `json:"rate"`
	// P50, P99 and P999 are latency percentiles in milliseconds: per
	// transaction (enqueue, and the inserters' in insert-and-work) or
	// enqueue to handler (latency).
	P50  float64 `json:"p50_ms,omitempty"`
	P99  float64 `json:"p99_ms,omitempty"`
	P999 float64 `json:"p999_ms,omitempty"`
	// Seconds is the measured interval.
	Seconds float64 `json:"seconds"`
	// Messages is how many messages the measure covers.
	Messages int64 `json:"messages"`
	// InsertRate, Backlog and BacklogSeconds describe insert-and-work: the
	// rate the inserters achieved, the messages written but not completed
	// when the time was up, and that backlog in seconds of inserts.
	InsertRate     float64 `json:"insert_rate,omitempty"`
	Backlog        int64   `json:"backlog,omitempty"`
	BacklogSeconds float64 `json:"backlog_seconds,omitempty"`
	// Missing, Duplicates, OutOfOrder and Phantoms are the checks of the
	// handler (see Checker.Verify); Unverified counts messages written
	// whose handling could not be checked because the case stopped waiting.
	Missing    int64 `json:"missing"`
	Duplicates int64 `json:"duplicates"`
	OutOfOrder int64 `json:"out_of_order"`
	Phantoms   int64 `json:"phantoms"`
	Unverified int64 `json:"unverified"`
	// Unhandled is how far the system's count of messages done ran ahead
	// of the messages its handler had taken: work recorded but never done.
	Unhandled int64 `json:"unhandled,omitempty"`
	// Ordered says the system promised stream order in this case, so that
	// OutOfOrder counts as a violation (River is run unordered).
	Ordered bool `json:"ordered,omitempty"`
	// Load is the machine's one-minute load average when the case began,
	// read by the parent: this machine is shared, and noise shows here.
	Load float64 `json:"load,omitempty"`
	// Busy is the share of CPU time (0 to 1) other processes used just
	// before the case began, after the parent waited for a quiet moment.
	Busy float64 `json:"busy,omitempty"`
	// Partial, when set, says the case stopped before the end it measures
	// (a drain that timed out): its figures cover only what was done.
	Partial string `json:"partial,omitempty"`
	// Error says why the case failed, if it did.
	Error string `json:"error,omitempty"`
}

// Violations is the number of wrong outcomes: messages lost, handled
// without having been written, recorded done without being handled, or
// handled out of an order promised.
func (r *Result) Violations() int64 {
	v := r.Missing + r.Phantoms + r.Unhandled
	if r.Ordered {
		v += r.OutOfOrder
	}
	return v
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, by
// nearest rank.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// setLatency fills in the percentiles of sorted.
func (r *Result) setLatency(sorted []time.Duration) {
	r.P50 = ms(Percentile(sorted, 50))
	r.P99 = ms(Percentile(sorted, 99))
	r.P999 = ms(Percentile(sorted, 99.9))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
