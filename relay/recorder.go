package relay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// maxRecord is the most outcomes one recording call carries.
const maxRecord = 1000

// The recorder is the goroutine that records the workers' outcomes, in
// store calls of its own that claim nothing, as fast as the store takes
// them: the outcomes reported while one call is under way go in the next.
// A call that fails is made again after a back-off. When the store is
// reachable (an empty call succeeds) but a call fails, one of its outcomes
// is one the store refuses: the recorder halves the call until it finds
// it, records the rest, and drops that one with an ERROR record (its lease
// lapses and the message is tried again), so that one poison outcome can
// never wedge the relay. A call the database cancels for running too long
// (store.ErrTimedOut: a statement_timeout shorter than deleting a thousand
// delivered messages) is halved too, and the recorder's calls stay
// smaller for a while (callSize): before, the same call was made again
// after each back-off, failed each time, and nothing was recorded again.

// runRecorder records outcomes until stop is closed, then returns the
// outcomes it could not record to the relay's queue and closes done.
func (r *Relay) runRecorder(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx := r.stopCtx
	wait := r.cfg.PollInterval
	for {
		outs := r.takeOutcomes(r.recSize.fit(maxRecord))
		if len(outs) == 0 {
			select {
			case <-r.recordCh:
				continue
			case <-stop:
				return
			}
		}
		left := r.record(ctx, outs)
		if len(left) == 0 {
			wait = r.cfg.PollInterval
			continue
		}
		// A stream waiting on one of these learns at once that it was
		// not recorded, rather than after the back-off.
		notRecorded(left)
		r.putBack(left)
		t := r.clk.NewTimer(wait)
		select {
		case <-t.C():
		case <-stop:
			t.Stop()
			return
		}
		wait = min(2*wait, r.cfg.MaxPollInterval)
	}
}

// record records outs and returns those it could not record for now. Only
// the recorder's goroutine calls it, or the shutdown once the recorder has
// returned.
func (r *Relay) record(ctx context.Context, outs []outcome) []outcome {
	stop := false
	return r.recordHalves(ctx, outs, &stop)
}

// recordHalves is record. A call that timed out is made again in halves;
// once a call of one outcome timed out, stop is set, and the rest is
// returned without a call: a database that cannot record one outcome in
// its statement_timeout is not asked a thousand times.
func (r *Relay) recordHalves(ctx context.Context, outs []outcome, stop *bool) []outcome {
	if *stop {
		return outs
	}
	start := r.clk.Now()
	res, err := r.recordCall(ctx, outs)
	if err == nil {
		r.recSize.succeeded(start, len(outs))
		r.settleResult(outs, res)
		return nil
	}
	if timedOutErr(ctx, err) {
		if !r.recSize.timedOut(start, len(outs), err) {
			*stop = true
			return outs
		}
		half := len(outs) / 2
		return append(r.recordHalves(ctx, outs[:half], stop), r.recordHalves(ctx, outs[half:], stop)...)
	}
	if r.outOfReach(err) || !r.storeReachable(ctx) {
		// Nothing was refused: the call never reached a decision (a killed
		// connection, while another connection of the pool answers the
		// probe, dropped deliveries that had succeeded, and they were sent
		// again; so did SQLite's write lock held by another connection past
		// the lock wait, ErrBusy, and free again by the time of the probe).
		return outs
	}
	if len(outs) == 1 {
		r.unrecordable(outs[0], err)
		return nil
	}
	half := len(outs) / 2
	return append(r.recordHalves(ctx, outs[:half], stop), r.recordHalves(ctx, outs[half:], stop)...)
}

// settleResult settles outs, which a store call returning res carried:
// those the store refused on their own are dropped (unrecordable), the
// rest settled.
func (r *Relay) settleResult(outs []outcome, res *store.Result) {
	if len(outs) == 0 {
		return
	}
	if len(res.Rejected) == 0 {
		r.settle(outs, res)
		return
	}
	refused := make(map[uuid.UUID]error, len(res.Rejected))
	for _, rj := range res.Rejected {
		refused[rj.ID] = rj.Err
	}
	kept := make([]outcome, 0, len(outs))
	for _, o := range outs {
		if rerr, ok := refused[o.m.ID]; ok {
			r.unrecordable(o, rerr)
			continue
		}
		kept = append(kept, o)
	}
	r.settle(kept, res)
}

// recordCall makes one store call recording outs.
func (r *Relay) recordCall(ctx context.Context, outs []outcome) (*store.Result, error) {
	b := &store.Batch{Instance: r.cfg.Instance, SkipMaintenance: r.fleet != nil}
	for i := range outs {
		outs[i].addTo(b)
	}
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	res, err := r.store.ProcessBatch(ctx, b)
	if err != nil {
		r.stats.storeErrors.Add(1)
		r.log.LogAttrs(ctx, slog.LevelDebug, "recording outcomes failed; will try again",
			slog.Int("outcomes", len(outs)), slog.String("error", err.Error()))
		return nil, err
	}
	r.stats.batches.Add(1)
	return res, nil
}

// storeReachable makes an empty store call (a heart-beat) and reports
// whether it succeeded.
func (r *Relay) storeReachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	_, err := r.store.ProcessBatch(ctx, &store.Batch{Instance: r.cfg.Instance, SkipMaintenance: r.fleet != nil})
	return err == nil
}

// unrecordable drops an outcome the store refuses while it takes others.
func (r *Relay) unrecordable(o outcome, err error) {
	if err == nil {
		err = errors.New("refused")
	}
	r.stats.unrecorded.Add(1)
	r.logAttempt(slog.LevelError, "the store refused to record an outcome; the message's lease will lapse and it will be tried again", &o,
		slog.String("store_error", err.Error()))
	r.endFlights([]outcome{o})
	notRecorded([]outcome{o})
}

// settle accounts for outcomes the store has recorded and ends their
// flights, then tells the streams waiting on them. A flight claimed again
// meanwhile gives back the lease that claim took.
func (r *Relay) settle(outs []outcome, res *store.Result) {
	r.recorded(outs, res)
	r.endFlights(outs)
	// Rejected outcomes do not come here (record drops them on their
	// own); a stale one ended a lease that was lost.
	stale := idSet(res.Stale)
	for i := range outs {
		if outs[i].recorded == nil {
			continue
		}
		_, lost := stale[outs[i].m.ID]
		then := outs[i].recorded
		outs[i].recorded = nil
		then(!lost)
	}
}

// notRecorded tells the streams waiting on outs that they were not
// recorded (for now), and forgets them: each is told once.
func notRecorded(outs []outcome) {
	for i := range outs {
		if then := outs[i].recorded; then != nil {
			outs[i].recorded = nil
			then(false)
		}
	}
}

// endFlights ends the flights of outs, whose outcomes are settled.
func (r *Relay) endFlights(outs []outcome) {
	var giveBack []outcome
	r.fl.mu.Lock()
	for i := range outs {
		id := outs[i].m.ID
		f, ok := r.fl.m[id]
		if !ok {
			continue
		}
		if f.reclaimed {
			f.reclaimed = false
			giveBack = append(giveBack, outcome{m: f.m, dest: f.dest, kind: released, cause: causeReclaimed})
			continue
		}
		if f.probe && f.dest != nil {
			f.dest.probeDone()
		}
		r.fl.end(id, f)
		// A release leaves the message claimable at once, so a claim
		// under way may take it again legitimately: only outcomes that
		// settle the message (delivered, or charged and rescheduled) are
		// watched. Watching releases too made a stream whose messages
		// were given back during a claim be given back again by every
		// later claim, for as long as claims and records kept overlapping.
		if r.fl.recent != nil && outs[i].kind != released {
			r.fl.recent[id] = struct{}{}
		}
	}
	n := len(r.fl.m)
	r.fl.mu.Unlock()
	r.stats.inFlight.Store(int64(n))
	r.giveBack(giveBack...)
	r.wake()
}
