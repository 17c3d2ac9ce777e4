package store

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// The circuits table is written by the fleet's relays and, now and then,
// by an operator or a program in another language with plain SQL. A
// value the store cannot use (an infinite time, text where SQLite keeps
// unix milliseconds, a row without a destination) must not make
// Fleet.Circuits fail: every relay would then stop matching its gates to
// the fleet for every destination, and the admin API's breakers would
// answer 500, all because of one row. The stores read such a value as
// NULL (a time) or zero (an interval), skip a row they cannot name, and
// log each once with CircuitWarnings.

// CircuitWarnings logs, once each, the values of the circuits table a
// store reads past. Relays read the circuits every poll interval; a bad
// row logged on every reading would drown the log. The zero value is
// ready to use.
type CircuitWarnings struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxCircuitWarnings bounds CircuitWarnings' memory: past it, what was
// logged is forgotten and logged again when read again.
const maxCircuitWarnings = 1000

// Warn logs at WARN, unless it did for the same value before, that the
// circuit of destination holds in column a value the store reads past,
// and what it does instead (such as "read as NULL").
func (w *CircuitWarnings) Warn(ctx context.Context, log *slog.Logger, storeName, destination string, e *ColumnError, instead string) {
	key := destination + "\x00" + e.Error()
	w.mu.Lock()
	if w.seen == nil || len(w.seen) >= maxCircuitWarnings {
		w.seen = map[string]bool{}
	}
	logged := w.seen[key]
	w.seen[key] = true
	w.mu.Unlock()
	if logged {
		return
	}
	log.LogAttrs(ctx, slog.LevelWarn, "circuit row holds a value the store cannot use; "+instead,
		slog.String("store", storeName), slog.String("destination", outbox.CleanText(destination, maxShownValue)),
		slog.String("error", e.Error()))
}

// CircuitInterval is a probe interval of n units as a duration, at most
// the longest time.Duration: a larger one, written by hand, wrapped round
// to a negative interval.
func CircuitInterval(n int64, unit time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}
