package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

const (
	// cancelGrace is how long, on the relay's clock, shutdown waits for
	// deliveries to return once their contexts are cancelled. A transport
	// that ignores its context is abandoned after it, and its messages
	// are given back.
	cancelGrace = 5 * time.Second
	// finalCallTimeout bounds the last store call on the wall clock.
	finalCallTimeout = 5 * time.Second
)

// shutdown runs once Run's context is done: no more claims; queued tasks
// are given back; deliveries in progress get ShutdownTimeout to finish
// (their outcomes are recorded and their leases renewed meanwhile), then
// their contexts are cancelled; a last store call records what is left.
func (l *loop) shutdown(stopRecorder chan struct{}, recorderDone <-chan struct{}) error {
	r := l.r
	r.stopping.Store(true)
	deadline := r.clk.NewTimer(r.cfg.ShutdownTimeout)
	defer deadline.Stop()
	for _, t := range r.sched.close() {
		r.report(shutdownRelease(t.dest, t.msgs)...)
	}
	if r.hooks.onShutdown != nil {
		r.hooks.onShutdown()
	}
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "relay shutting down",
		slog.Int("in_flight", r.fl.len()), slog.Duration("timeout", r.cfg.ShutdownTimeout))

	workersDone := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(workersDone)
	}()
	deadlineC := deadline.C()
	var graceC <-chan time.Time
	for {
		l.drainStep()
		wait := r.clk.NewTimer(l.untilRenew())
		select {
		case <-workersDone:
			wait.Stop()
			return l.finish(false, stopRecorder, recorderDone)
		case <-r.wakeCh:
		case <-wait.C():
		case <-deadlineC:
			deadlineC = nil
			r.log.LogAttrs(context.Background(), slog.LevelWarn, "shutdown timeout reached; cancelling deliveries in progress",
				slog.Int("in_flight", r.fl.len()))
			r.cancelDeliveries()
			grace := r.clk.NewTimer(cancelGrace)
			defer grace.Stop()
			graceC = grace.C()
			if r.hooks.onCancel != nil {
				r.hooks.onCancel()
			}
		case <-graceC:
			wait.Stop()
			return l.finish(true, stopRecorder, recorderDone)
		}
		wait.Stop()
	}
}

// drainStep renews leases during shutdown (the recorder records the
// outcomes meanwhile), on the relay's stopCtx since Run's is done.
func (l *loop) drainStep() {
	ctx, cancel := context.WithTimeout(l.r.stopCtx, storeCallTimeout)
	defer cancel()
	_, _ = l.step(ctx, false)
}

// finish stops the recorder and makes the last store call: every outcome
// not yet recorded and, when abandoned, a release of each message whose
// delivery never returned.
func (l *loop) finish(abandoned bool, stopRecorder chan struct{}, recorderDone <-chan struct{}) error {
	r := l.r
	close(stopRecorder)
	<-recorderDone
	outs := append(r.takeOutcomes(0), r.takeGivenBack()...)
	stuck := 0
	if abandoned {
		r.fl.mu.Lock()
		for _, f := range r.fl.m {
			if !f.reported {
				outs = append(outs, outcome{m: f.m, dest: f.dest, kind: released, cause: causeShutdown})
				stuck++
			}
		}
		r.fl.mu.Unlock()
	}
	defer func() {
		r.stats.inFlight.Store(int64(r.fl.len()))
		n := r.rounds.Add(1)
		r.turned.set(n)
		r.idle.set(n)
	}()
	if len(outs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), finalCallTimeout)
		defer cancel()
		var left []outcome
		for len(outs) > 0 {
			for i := 0; i < len(outs); i += maxRecord {
				left = append(left, r.record(ctx, outs[i:min(i+maxRecord, len(outs))])...)
			}
			notRecorded(left)
			// The strict streams that waited on these give back the rest.
			outs = r.takeOutcomes(0)
		}
		if len(left) > 0 {
			r.log.LogAttrs(ctx, slog.LevelError, "relay could not record its last outcomes; their leases will lapse",
				slog.Int("outcomes", len(left)))
			return fmt.Errorf("relay: shutdown: %d outcomes could not be recorded", len(left))
		}
	}
	if stuck > 0 {
		return fmt.Errorf("relay: shutdown: %d deliveries did not return after their contexts were cancelled; their messages were released", stuck)
	}
	return nil
}
