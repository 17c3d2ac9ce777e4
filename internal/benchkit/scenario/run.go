package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Run runs scenario name on sys at scale sc and returns what it measured.
// settle, when not nil, runs after a drain's backlog is written and before
// the clock starts, so that every system starts from the same state (on
// PostgreSQL: VACUUM ANALYZE and a CHECKPOINT).
func Run(ctx context.Context, name string, sys System, sc Scale, store string, settle func(context.Context) error) (Result, error) {
	switch name {
	case Enqueue1:
		return runEnqueue(ctx, sys, sc, 1)
	case Enqueue100:
		return runEnqueue(ctx, sys, sc, 100)
	case Drain, DrainLarge:
		n := sc.DrainSize(name, store)
		if n == 0 {
			return Result{}, fmt.Errorf("scenario %s does not run on %s at scale %s", name, store, sc.Name)
		}
		return runDrain(ctx, sys, sc, n, settle)
	case Work:
		return runWork(ctx, sys, sc, 0, 0)
	case WorkOrdered:
		return runWork(ctx, sys, sc, sc.Streams, 0)
	case WorkFailing:
		return runWork(ctx, sys, sc, 0, sc.FailEvery)
	case Latency:
		return runLatency(ctx, sys, sc)
	}
	return Result{}, fmt.Errorf("unknown scenario %q", name)
}

// batch returns rows messages numbered from base, stamped now.
func batch(base int64, rows int, stream func(i int) int64) []Msg {
	now := time.Now().UnixNano()
	msgs := make([]Msg, rows)
	for i := range msgs {
		msgs[i] = Msg{N: base + int64(i), Stream: stream(i), T: now}
	}
	return msgs
}

func noStream(int) int64 { return -1 }

// runEnqueue writes rows-row transactions from EnqueueWriters goroutines
// for EnqueueFor, timing each transaction, after a warm-up of a tenth of
// that (connections opened, statements prepared) that is not counted.
func runEnqueue(ctx context.Context, sys System, sc Scale, rows int) (Result, error) {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	from := time.Now().Add(sc.EnqueueFor / 10)
	deadline := from.Add(sc.EnqueueFor)
	for range sc.EnqueueWriters {
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				msgs := batch(next.Add(int64(rows))-int64(rows), rows, noStream)
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if err := sys.Insert(ctx, msgs); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				if t0.After(from) {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(from)
	if firstErr != nil {
		return Result{}, firstErr
	}
	written := int64(len(lat)) * int64(rows)
	r := Result{Rate: float64(written) / elapsed.Seconds(), Seconds: elapsed.Seconds(), Messages: written}
	sortDurations(lat)
	r.setLatency(lat)
	return r, nil
}

// runDrain preloads n messages, then times the system's workers from
// Start until it has recorded all n as done.
func runDrain(ctx context.Context, sys System, sc Scale, n int, settle func(context.Context) error) (Result, error) {
	msgs := make([]Msg, n)
	for i := range msgs {
		msgs[i] = Msg{N: int64(i), Stream: -1}
	}
	if err := sys.Preload(ctx, msgs); err != nil {
		return Result{}, fmt.Errorf("preload: %w", err)
	}
	msgs = nil
	if settle != nil {
		if err := settle(ctx); err != nil {
			return Result{}, fmt.Errorf("settle: %w", err)
		}
	}
	c := NewChecker(0, 0)
	start := time.Now()
	if err := sys.Start(ctx, c.Handle); err != nil {
		return Result{}, err
	}
	reached := waitFor(ctx, sc.DrainTimeout, 2*time.Millisecond, func() bool { return sys.Completed() >= int64(n) })
	elapsed := time.Since(start)
	done := sys.Completed()
	r := Result{Rate: float64(done) / elapsed.Seconds(), Seconds: elapsed.Seconds(), Messages: int64(n)}
	r.Unhandled = max(0, done-c.Handled())
	stopErr := sys.Stop(ctx)
	verify(c, &r, int64(n), reached)
	if !reached {
		r.Partial = fmt.Sprintf("timed out after %s with %d of %d done; the rate is of the part drained", sc.DrainTimeout, done, n)
	}
	return r, stopErr
}

// verify checks c's handling of messages 0 to total-1 into r. When the
// system did not finish (complete false), messages not handled are
// Unverified, not Missing.
func verify(c *Checker, r *Result, total int64, complete bool) {
	c.Verify(r, total)
	if !complete {
		r.Unverified, r.Missing = r.Missing, 0
	}
}

// waitFor polls cond every tick until it holds (true) or limit passes.
func waitFor(ctx context.Context, limit, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return cond()
		}
		time.Sleep(tick)
	}
	return true
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
