package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// task is what one worker delivers in one go: a single message, or the
// messages of one ordered stream claimed together, in Seq order.
type task struct {
	dest  *destination
	msgs  []*outbox.Message
	probe bool // claimed to probe the destination's open circuit
	cur   int  // the index in msgs of the message being delivered
}

// scheduler hands tasks to workers, round-robin over the destinations and
// never more than a destination's Concurrency at once.
//
// With more than one destination, the last reserve idle workers go only to
// a destination running fewer than its fair share (the workers divided
// among the destinations with work): a destination whose deliveries hang
// or crawl fills the pool up to the reserve and no further, so that
// another's messages start at once instead of waiting for a slow delivery
// to end (with the defaults every destination may use every worker, and
// one that hung held all of them for its whole timeout). As the slow
// deliveries end, the workers go to whoever is under its share. The
// reserve stays idle while a single destination has work: a delivery, once
// started, cannot be taken back when another destination's messages come.
//
// A destination with a RateLimit starts a task only with a token: its
// tasks wait here for one, holding no worker, and an alarm on the relay's
// clock wakes the workers when the first is due.
type scheduler struct {
	mu      sync.Mutex
	cond    sync.Cond
	clk     clock.Clock
	dests   []*destination
	queues  map[*destination][]*task
	next    int
	closed  bool
	workers int // the pool's size
	running int // tasks running, over every destination
	reserve int // idle workers kept for destinations under their share
	alarm   alarm
	limited bool // a destination has a RateLimit: take reads the clock
}

func newScheduler(dests []*destination, workers int, clk clock.Clock) *scheduler {
	s := &scheduler{dests: dests, queues: make(map[*destination][]*task, len(dests)), workers: workers, clk: clock.OrReal(clk),
		limited: slices.ContainsFunc(dests, func(d *destination) bool { return d.limit != nil })}
	if len(dests) > 1 {
		s.reserve = max(1, workers/4)
	}
	s.cond.L = &s.mu
	return s
}

// push queues t, and reports false (queuing nothing) once the scheduler
// is closed.
func (s *scheduler) push(t *task) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queues[t.dest] = append(s.queues[t.dest], t)
	s.mu.Unlock()
	s.cond.Signal()
	return true
}

// waitingTasks is a destination's entry in scheduler.waiting.
type waitingTasks struct {
	dest   *destination
	queued int  // waiting for a worker or, under a RateLimit, a token
	held   bool // its RateLimit holds the first of them back
}

// waiting returns, for every destination, the tasks queued for it and
// whether its RateLimit holds them back now. The clock is read under the
// scheduler's mutex, as take reads it, so that a reading never looks to
// the limiter like a step back.
func (s *scheduler) waiting() []waitingTasks {
	s.mu.Lock()
	defer s.mu.Unlock()
	var now time.Time
	if s.limited {
		now = s.clk.Now()
	}
	out := make([]waitingTasks, len(s.dests))
	for i, d := range s.dests {
		n := len(s.queues[d])
		out[i] = waitingTasks{dest: d, queued: n, held: n > 0 && d.limit != nil && d.limit.wait(now) > 0}
	}
	return out
}

// take blocks until a task may start, and returns false once the
// scheduler is closed.
func (s *scheduler) take() (*task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil, false
		}
		var now time.Time // read only for the limits, off the path of a relay without any
		if s.limited {
			now = s.clk.Now()
		}
		share := -1 // no bound beyond Concurrency while more than reserve workers are idle
		if s.workers-s.running <= s.reserve {
			share = s.fairShare(now)
		}
		var wake time.Duration // until the first token due of a destination held by its limit
		for i := range s.dests {
			k := (s.next + i) % len(s.dests)
			d := s.dests[k]
			q := s.queues[d]
			if len(q) == 0 || d.running >= d.concurrency || (share >= 0 && d.running >= share) {
				continue
			}
			if d.limit != nil {
				if w := d.limit.take(now); w > 0 {
					if wake == 0 || w < wake {
						wake = w
					}
					continue
				}
			}
			t := q[0]
			q[0] = nil
			s.queues[d] = q[1:]
			d.running++
			s.running++
			s.next = (k + 1) % len(s.dests)
			return t, true
		}
		if wake > 0 {
			s.alarm.set(s, now, wake)
		}
		s.cond.Wait()
	}
}

// fairShare is the pool divided among the destinations with tasks queued
// or running, counting at least two: a destination alone with work keeps
// to the pool less the reserve, since a delivery cannot be taken back
// from it when another's messages arrive. Tasks waiting for their
// destination's token at now do not count: they could not take a worker.
func (s *scheduler) fairShare(now time.Time) int {
	active := 0
	for _, d := range s.dests {
		if d.running > 0 || len(s.queues[d]) > 0 && (d.limit == nil || d.limit.wait(now) == 0) {
			active++
		}
	}
	return max(1, s.workers/max(2, active))
}

func (s *scheduler) done(t *task) {
	s.mu.Lock()
	t.dest.running--
	s.running--
	s.mu.Unlock()
	s.cond.Broadcast()
}

// close stops handing out tasks and returns those that never started.
func (s *scheduler) close() []*task {
	s.mu.Lock()
	var left []*task
	for _, d := range s.dests {
		left = append(left, s.queues[d]...)
		delete(s.queues, d)
	}
	s.closed = true
	s.alarm.stop()
	s.mu.Unlock()
	s.cond.Broadcast()
	return left
}

// work is a worker goroutine.
func (r *Relay) work() {
	defer r.workers.Done()
	for {
		t, ok := r.sched.take()
		if !ok {
			return
		}
		r.runGuarded(t)
	}
}

// errGoexit is the failure of a delivery whose handler called
// runtime.Goexit.
var errGoexit = errorhandling.WithReason(errorhandling.Permanent(
	errors.New("the handler called runtime.Goexit (t.FailNow, t.Fatal?) and ended the relay's worker")),
	errorhandling.ReasonHandlerException)

// runGuarded runs t. A handler that calls runtime.Goexit (t.Fatal in a
// test's handler) ends the worker's goroutine, which recover cannot stop:
// before, the worker was gone for good, with its destination's running
// count and the message's flight, which stayed leased and renewed, never
// recorded. Now the message it was delivering fails like one whose
// handler panicked, the rest of its task is given back, and another
// worker takes the goroutine's place.
func (r *Relay) runGuarded(t *task) {
	finished := false
	defer func() {
		if finished {
			return
		}
		r.workers.Add(1)
		go r.work()
		if t.cur < len(t.msgs) {
			m := t.msgs[t.cur]
			o := r.decide(t.dest, m, errGoexit, 0, 1)
			if t.probe {
				r.probeResult(t.dest, r.clk.Now(), true)
			}
			r.report(append([]outcome{o}, cascade(t.dest, t.msgs[t.cur+1:])...)...)
		}
		r.sched.done(t)
	}()
	r.runTask(t)
	r.sched.done(t)
	finished = true
}

// runTask delivers a task's messages in order. When one fails under strict
// ordering, the rest are given back undelivered; under release ordering
// they go on.
//
// In a strictly ordered stream a message is not sent until the store has
// recorded the delivery of the one before it: had the relay sent it at
// once, a stall past the lease before the recording would let another
// instance claim the earlier message again and send it after the later
// one. The worker hands the outcome to the recorder and moves on to
// another task; the rest of the stream's task waits, holding no worker,
// and goes back to the scheduler once the recorder has the store's word
// (see resume). When the recording fails (the store is unreachable, or
// refused it) the rest is given back undelivered, never sent. The lease
// of each message is checked again before it starts.
//
// A destination with a RateLimit takes a token for each message: the rest
// of a task goes back to the scheduler after each, to wait for its next
// token without the worker.
func (r *Relay) runTask(t *task) {
	for i, m := range t.msgs {
		if r.stopping.Load() {
			r.report(shutdownRelease(t.dest, t.msgs[i:])...)
			return
		}
		if i > 0 && t.dest.limit != nil {
			if rest := t.msgs[i:]; !r.sched.push(&task{dest: t.dest, msgs: rest, probe: t.probe}) {
				r.report(shutdownRelease(t.dest, rest)...)
			}
			return
		}
		if !r.fl.startable(m.ID, r.clk.Now(), r.startMargin) {
			// The lease lapsed (the relay stalled, or a renewal was
			// refused): another instance may hold the message now.
			r.report(lapsedRelease(t.dest, t.msgs[i:])...)
			return
		}
		t.cur = i
		o := r.deliver(t.dest, m, t.probe)
		t.cur = len(t.msgs) // reported below
		rest := t.msgs[i+1:]
		if len(rest) == 0 || r.cfg.Store.EffectiveOrdering(m) != outbox.OrderingStrict {
			r.report(o)
			continue
		}
		if o.kind != delivered {
			// Whatever happened to m, the stream may not go past it here.
			r.report(append([]outcome{o}, r.behind(t.dest, &o, rest)...)...)
			return
		}
		next := &task{dest: t.dest, msgs: rest, probe: t.probe}
		o.recorded = func(ok bool) { r.resume(next, ok) }
		r.report(o)
		if r.hooks.onWait != nil {
			r.hooks.onWait(m)
		}
		return
	}
}

// resume goes on with the rest of a strict stream's task once the
// delivery before it was recorded (ok), and gives it back undelivered
// otherwise, or when the relay is shutting down. It runs on the
// recorder's goroutine and does not block.
func (r *Relay) resume(t *task, ok bool) {
	if !ok {
		r.report(cascade(t.dest, t.msgs)...)
		return
	}
	if !r.sched.push(t) {
		r.report(shutdownRelease(t.dest, t.msgs)...)
	}
}

// behind gives back the messages of a strict stream behind o, which was
// not delivered: as a cascade, or as a shutdown release when shutdown
// cut o short.
func (r *Relay) behind(d *destination, o *outcome, rest []*outbox.Message) []outcome {
	if o.kind == released && o.cause == causeShutdown {
		return shutdownRelease(d, rest)
	}
	return cascade(d, rest)
}

// lapsedRelease gives back messages whose lease lapsed before they were
// started. The store ignores the release of a message another instance
// took meanwhile.
func lapsedRelease(d *destination, msgs []*outbox.Message) []outcome {
	outs := make([]outcome, len(msgs))
	for i, m := range msgs {
		outs[i] = outcome{m: m, dest: d, kind: released, cause: causeLeaseLapsed}
	}
	return outs
}

// shutdownRelease gives back messages that were not started.
func shutdownRelease(d *destination, msgs []*outbox.Message) []outcome {
	outs := make([]outcome, len(msgs))
	for i, m := range msgs {
		outs[i] = outcome{m: m, dest: d, kind: released, cause: causeShutdown}
	}
	return outs
}

// deliver makes one delivery attempt of m through its destination's
// breaker, in-process retry and timeout. A probe of an open circuit
// passes the breaker by: the gate let it through (breakers.go).
func (r *Relay) deliver(d *destination, m *outbox.Message, probe bool) outcome {
	// A Retry-After pause, or a circuit another instance opened, holds the
	// messages claimed before it as well as the claims after it.
	now := r.clk.Now()
	if until := d.pausedUntil(now); !until.IsZero() {
		return r.held(d, m, until.Sub(now))
	}
	var permit circuitbreaker.Permit
	if !probe {
		var err error
		if permit, err = d.breaker.Allow(); err != nil || d.isOpen() {
			if err == nil {
				permit.Done(context.Canceled) // nothing was learnt
			}
			return r.rejected(d, m)
		}
	}
	start := now // the breaker's gate takes no time worth a second reading
	completed, tries, last, lapsed := r.attempt(d, m, start, probe)
	end := r.clk.Now()
	stalled := last != nil && r.stalls.overlaps(start, end)
	// The transport refused the message before sending anything.
	unsent := errors.Is(last, transport.ErrNotSent)
	// The try was cut short because the relay no longer held the lease
	// (leaseBound).
	cut := lapsed && errors.Is(last, context.Canceled)
	if !probe {
		switch {
		case tries == 0 || stalled || unsent || cut:
			// No call was made, or the relay itself stalled during the
			// attempt, or lost the lease: nothing was learnt about the
			// destination.
			permit.Done(context.Canceled)
		default:
			permitDone(permit, last)
		}
		if d.breaker.State() == circuitbreaker.StateOpen && d.trip(end) {
			r.fleetOpened(d)
			r.wake()
		}
	}
	d.m.duration.Observe(end.Sub(start).Seconds())
	var o outcome
	if after, ok := transport.ElsewhereAfter(last); ok && tries > 0 {
		o = r.leftElsewhere(d, m, last, completed, after)
	} else {
		o = r.decide(d, m, last, completed, tries)
	}
	if stalled && o.kind != delivered {
		o = outcome{m: m, dest: d, kind: released, cause: causeStall, completed: completed, err: last}
		r.logAttempt(slog.LevelWarn, "the relay stalled during the delivery; not counted against the destination", &o)
	}
	if probe && tries > 0 && !stalled && !unsent && !cut {
		r.probeResult(d, end, !(o.kind == released && o.cause == causeDestination))
	}
	if lapsed && o.kind != delivered {
		// Between two tries the lease lapsed: another instance may hold
		// the message now, and a try here could overtake its deliveries.
		// Its failure is not charged; the store ignores the release if
		// another instance took the message.
		o = outcome{m: m, dest: d, kind: released, cause: causeLeaseLapsed, completed: completed, err: last}
		r.logAttempt(slog.LevelWarn, "lease lapsed between in-process tries; message given back", &o)
	}
	return o
}

// attempt runs the in-process retry. It returns the steps reported
// completed, the number of tries, and the error of the last try (nil on
// success). Only errors the relay's classifier calls retryable are tried again, and
// only while the destination's breaker stays closed and the error's
// retry-after hint fits in the attempt's timeout.
//
// A try after the first is made only while the relay still holds the
// message's lease; lapsed says it did not (the relay stalled, or the
// store refused a renewal, during the wait between tries).
//
// A probe of an open circuit is one try (but for a recognised fault,
// remedied and tried again at once): its verdict schedules the next
// probe, and an in-process retry after it (a second after a 503) put
// every probe off by that long, so that delivery resumed up to 6 s after
// the destination came back, where 5 s is the longest probe interval.
func (r *Relay) attempt(d *destination, m *outbox.Message, start time.Time, probe bool) (completed outbox.Status, tries int, last error, lapsed bool) {
	deadline := start.Add(d.timeout)
	actx, release := r.attemptContext(m.ID, start, d.timeout)
	defer release()
	// The transport asks, as late as it can before the message leaves,
	// whether the relay still holds the lease (transport.CheckSend):
	// leaseBound's timer may not have run yet when a process stopped past
	// the lease is continued, and the delivery's goroutine writes first.
	ctx := transport.WithSendGuard(actx, r.sendGuard(m.ID))
	defer func() {
		if last != nil && (actx.leaseLapsed() || errors.Is(last, errLeaseLapsed)) {
			lapsed = true // the try was cut short, or not made, when the lease lapsed
		}
	}()
	_ = d.exec.Execute(ctx, func() error {
		if tries > 0 {
			if d.breaker.State() == circuitbreaker.StateOpen {
				return errorhandling.Permanent(last) // stop: the destination tripped meanwhile
			}
			if !r.fl.holds(m.ID, r.clk.Now(), r.startMargin) {
				lapsed = true
				return errorhandling.Permanent(last)
			}
			if d.limit != nil && d.limit.take(r.clk.Now()) > 0 {
				return errorhandling.Permanent(last) // stop: no token for another try
			}
			r.stats.retries.Add(1)
			d.stats.retries.Add(1)
			d.m.retries.Inc()
			if r.log.Enabled(ctx, slog.LevelDebug) {
				r.log.LogAttrs(ctx, slog.LevelDebug, "retrying delivery in-process",
					slog.String("message_id", m.ID.String()), slog.String("destination", d.name),
					slog.String("stream", m.Stream), slog.Int("attempt", m.Attempts+1),
					slog.Int("try", tries+1), slog.String("error", outbox.TruncateError(last.Error())))
			}
		}
		tries++
		err := r.safeDeliver(ctx, d, m)
		last = err
		if err == nil {
			return nil
		}
		if errors.Is(err, errLeaseLapsed) {
			return errorhandling.Permanent(err) // stop: the lease is gone, nothing was sent
		}
		// StatusPublished is the relay's to set, on a delivery that
		// succeeded: on a failure the stores kept the message, never to be
		// claimed again (claims skip Published rows), neither retried nor
		// dead-lettered, and its strict stream went on past it.
		if s := CompletedSteps(err) &^ outbox.StatusPublished; s != 0 {
			completed |= s
			m.Status |= s // the next try sees what is done
		}
		verdict := r.inProcessVerdict(d, err, deadline)
		if c, _ := errorhandling.MarkedClass(verdict); probe && c != errorhandling.ClassRecognised {
			// Permanent here, not at the next try: the executor waits
			// out the back-off before it asks again. A recognised fault
			// is still remedied and tried again at once.
			return errorhandling.Permanent(err)
		}
		if !probe && (d.breaker.State() == circuitbreaker.StateOpen || d.isOpen() || !d.pausedUntil(r.clk.Now()).IsZero()) {
			// The circuit opened during the try (other deliveries'
			// failures, or the fleet's), or the destination was paused (a
			// Retry-After, this try's included): the worker stops now, and
			// the message is released (uncharged when the fault is the
			// destination's). It waited out the back-off, or
			// the Retry-After itself, holding a worker the others could
			// use, and every delivery that did so tried again the moment
			// the pause ended, in one burst across the fleet.
			return errorhandling.Permanent(err)
		}
		return verdict
	})
	return completed, tries, last, lapsed
}

// inProcessVerdict marks err for the executor: Permanent to stop the
// in-process retry, else Transient or Recognised (with its remedy).
//
// A retry-after hint of the destination's (a 429 or 503 with
// Retry-After) pauses the destination at once, for this relay's other
// workers and for the fleet: this attempt may wait it out in-process, and
// were the pause set only when the attempt ended, as it was, every other
// worker sent the destination a message meanwhile, got the same answer,
// and waited it out too, holding a worker each.
func (r *Relay) inProcessVerdict(d *destination, err error, deadline time.Time) error {
	v := r.classify(err)
	if after := boundRetryAfter(v.RetryAfter); after > 0 && v.Retryable && v.Blame == errorhandling.BlameDestination {
		d.pause(r.clk.Now().Add(after))
		r.fleetPaused(d, after)
	}
	if !v.Retryable || (v.RetryAfter > 0 && !r.clk.Now().Add(v.RetryAfter).Before(deadline)) {
		return errorhandling.Permanent(err)
	}
	var marked error
	if v.Class == errorhandling.ClassRecognised {
		marked = errorhandling.Recognised(err, v.Remedy)
	} else {
		marked = errorhandling.Transient(err)
	}
	if v.Code != "" {
		marked = errorhandling.WithCode(marked, v.Code)
	}
	return marked
}

// safeDeliver calls the transport, turning a panic into a permanent fault
// of the message (a bug in a handler must not take the relay down, and
// must not crash it again on every restart): reason HandlerException, with
// the stack in the operations log.
//
// The transport gets a copy of m: a handler may change the message it was
// handed (or enqueue it again for another destination, which gives it a
// new ID, Seq and status in place), and the relay records the outcome by
// m's ID. Before, the delivery was recorded under the new ID: the
// forwarded message was deleted undelivered and the original stayed
// leased for as long as the relay ran. Payload and Headers are shared.
func (r *Relay) safeDeliver(ctx context.Context, d *destination, m *outbox.Message) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		r.log.LogAttrs(ctx, slog.LevelError, "transport panicked",
			slog.String("message_id", m.ID.String()), slog.String("destination", d.name),
			slog.String("stream", m.Stream), slog.String("panic", outbox.TruncateError(fmt.Sprint(p))),
			slog.String("stack", string(debug.Stack())))
		err = errorhandling.WithReason(errorhandling.Permanent(fmt.Errorf("transport panicked: %v", p)),
			errorhandling.ReasonHandlerException)
	}()
	cp := *m
	if err = d.tr.Deliver(ctx, &cp); err != nil {
		// The relay logs, fingerprints and records err.Error(), on this
		// goroutine and the recorder's: an Error method that panics would
		// take the relay down there, and again on every restart.
		_ = err.Error()
		// The relay and its classifier walk err's chain (errors.Is,
		// errors.As) many times: a chain that never ends (an Unwrap that
		// returns its receiver, a cycle) would hold the worker in a busy
		// loop for good, with the message's lease renewed.
		err = errorhandling.EndlessChain(err)
	}
	return err
}

// classify is the relay's classifier's verdict on err. A classifier whose
// rule panics must not take the relay down: its verdict is then a
// transient fault blamed on the destination, reason HandlerException, so
// that no message is charged or dead-lettered for a bug in a rule, with
// the panic in an ERROR record.
func (r *Relay) classify(err error) (v errorhandling.Classification) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		r.log.LogAttrs(context.Background(), slog.LevelError, "the error classifier panicked; the fault is blamed on the destination",
			slog.String("panic", fmt.Sprint(p)), slog.String("error_type", errorTypes(err)),
			slog.String("stack", string(debug.Stack())))
		v = errorhandling.Classification{
			Class: errorhandling.ClassTransient, Retryable: true, Blame: errorhandling.BlameDestination,
			Reason: errorhandling.ReasonHandlerException, Code: "classifier_panic", Rule: "panic",
		}
	}()
	return r.classifier.Classify(err)
}

// permitDone reports err to the breaker through permit. The breaker's
// IsFailure (by default the relay's classifier, whose panic classify logs)
// may panic: the breaker then records the call as ignored, and the panic
// stops here.
func permitDone(permit circuitbreaker.Permit, err error) {
	defer func() { _ = recover() }()
	permit.Done(err)
}
