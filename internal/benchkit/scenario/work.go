package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runWork starts the workers, then writes BatchRows-row transactions from
// Inserters goroutines as fast as they go for WorkFor. It reports the rate
// of messages recorded done during the window, the backlog left at its
// end and the percentiles of the inserters' transactions, then keeps the
// workers going for up to VerifyFor so that every message written can be
// checked as handled. With streams > 0 the
// messages are spread over that many ordered streams, each written by one
// inserter in order; with failEvery > 0 the first attempt of every
// failEvery-th message fails.
func runWork(ctx context.Context, sys System, sc Scale, streams, failEvery int64) (Result, error) {
	c := NewChecker(failEvery, streams)
	if err := sys.Start(ctx, c.Handle); err != nil {
		return Result{}, err
	}
	var (
		next, inserted atomic.Int64
		stop           atomic.Bool
		mu             sync.Mutex
		firstErr       error
		lat            []time.Duration // each inserter's transactions, in the window
		wg             sync.WaitGroup
	)
	rows := int64(sc.BatchRows)
	start := time.Now()
	for w := range sc.Inserters {
		wg.Go(func() {
			var k int64 // this inserter's message count: its streams are w, w+Inserters, ...
			stream := noStream
			if streams > 0 {
				stream = func(i int) int64 {
					return ((k+int64(i))*int64(sc.Inserters) + int64(w)) % streams
				}
			}
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for !stop.Load() && ctx.Err() == nil {
				msgs := batch(next.Add(rows)-rows, int(rows), stream)
				t0 := time.Now()
				if err := sys.Insert(ctx, msgs); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					stop.Store(true)
					return
				}
				if !stop.Load() {
					mine = append(mine, time.Since(t0))
				}
				k += rows
				inserted.Add(rows)
			}
		})
	}
	timer := time.NewTimer(sc.WorkFor)
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	done, written := sys.Completed(), inserted.Load()
	elapsed := time.Since(start)
	unhandled := max(0, done-c.Handled())
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		_ = sys.Stop(ctx)
		return Result{}, fmt.Errorf("insert: %w", firstErr)
	}
	total := inserted.Load()
	r := Result{
		Rate:       float64(done) / elapsed.Seconds(),
		Seconds:    elapsed.Seconds(),
		Messages:   done,
		InsertRate: float64(written) / elapsed.Seconds(),
		Backlog:    written - done,
		Unhandled:  unhandled,
	}
	if r.InsertRate > 0 {
		r.BacklogSeconds = float64(r.Backlog) / r.InsertRate
	}
	// The percentiles are the inserters' transactions: how long the
	// application's writes took while the system worked beside them.
	sortDurations(lat)
	r.setLatency(lat)
	complete := waitFor(ctx, sc.VerifyFor, 10*time.Millisecond, func() bool { return sys.Completed() >= total })
	stopErr := sys.Stop(ctx)
	verify(c, &r, total, complete)
	return r, stopErr
}

// runLatency starts the workers and writes LatencyRate messages a second
// for LatencyFor, each in its own transaction begun at its scheduled time
// whether or not earlier ones have finished (an open loop, so that a slow
// commit does not hide the latency of the messages behind it). It reports
// the percentiles of the time from just before each message's Insert until
// the handler has it. The first second (a quarter of LatencyFor at most)
// is a warm-up whose latencies are not kept.
func runLatency(ctx context.Context, sys System, sc Scale) (Result, error) {
	warm := int64(sc.LatencyRate) * int64(min(time.Second, sc.LatencyFor/4)) / int64(time.Second)
	total := warm + int64(sc.LatencyRate)*int64(sc.LatencyFor)/int64(time.Second)
	c := NewChecker(0, 0)
	c.RecordLatency(warm)
	if err := sys.Start(ctx, c.Handle); err != nil {
		return Result{}, err
	}
	time.Sleep(200 * time.Millisecond) // let the workers start and go idle
	interval := time.Second / time.Duration(sc.LatencyRate)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			m := Msg{N: i, Stream: -1, T: time.Now().UnixNano()}
			if err := sys.Insert(ctx, []Msg{m}); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	complete := waitFor(ctx, sc.VerifyFor, 5*time.Millisecond, func() bool { return c.Handled() >= total })
	elapsed := time.Since(start)
	stopErr := sys.Stop(ctx)
	if firstErr != nil {
		return Result{}, fmt.Errorf("insert: %w", firstErr)
	}
	r := Result{Rate: float64(c.Handled()) / elapsed.Seconds(), Seconds: elapsed.Seconds(), Messages: total - warm}
	r.setLatency(c.Latencies())
	verify(c, &r, total, complete)
	return r, stopErr
}

func sortDurations(d []time.Duration) { slices.Sort(d) }
