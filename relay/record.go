package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// recorded accounts for outcomes the store has just recorded: counts,
// metrics, and the log records that must wait for the store's verdict
// (whether a failure dead-lettered its message).
func (r *Relay) recorded(outs []outcome, res *store.Result) {
	if len(outs) == 0 {
		return
	}
	dead := idSet(res.DeadLettered)
	stale := idSet(res.Stale)
	rejected := make(map[uuid.UUID]error, len(res.Rejected))
	for _, rj := range res.Rejected {
		rejected[rj.ID] = rj.Err
	}
	now := r.clk.Now()
	for i := range outs {
		o := &outs[i]
		if err, ok := rejected[o.m.ID]; ok {
			// the database refused this outcome alone; the message keeps
			// its lease until it lapses and is then claimed again
			r.logAttempt(slog.LevelError, "outcome not recorded: the store refused it", o,
				slog.String("store_error", err.Error()))
			continue
		}
		switch o.kind {
		case delivered:
			r.stats.delivered.Add(1)
			if o.dest != nil {
				o.dest.stats.delivered.Add(1)
				o.dest.m.delivered.Inc()
				o.dest.m.endToEnd.Observe(now.Sub(o.m.CreatedAt).Seconds())
			}
			r.hookDelivered(o)
		case failed:
			if _, ok := stale[o.m.ID]; ok {
				r.logAttempt(slog.LevelDebug, "failure not recorded: the lease was lost", o)
				continue
			}
			r.stats.failed.Add(1)
			if o.dest != nil {
				o.dest.stats.failed.Add(1)
			}
			r.metrics.failed.WithLabelValues(o.destLabel(), o.v.Reason.String(), o.v.Class.String(), o.v.Blame.String()).Inc()
			if _, ok := dead[o.m.ID]; ok {
				r.deadLettered(o)
				r.hookDeadLettered(o)
				continue
			}
			r.logAttempt(slog.LevelInfo, "delivery failed; retry scheduled", o)
			r.hookFailed(o)
		case released:
			if _, ok := stale[o.m.ID]; ok {
				r.logAttempt(slog.LevelDebug, "release not recorded: the lease was lost", o)
				continue
			}
			r.stats.released.Add(1)
			if o.dest != nil {
				o.dest.stats.released.Add(1)
			}
			r.metrics.released.WithLabelValues(o.destLabel(), o.cause).Inc()
		}
	}
}

// deadLettered accounts for and logs a failure that moved its message to
// the dead-letter queue.
func (r *Relay) deadLettered(o *outcome) {
	r.stats.deadLettered.Add(1)
	if o.dest != nil {
		o.dest.stats.deadLettered.Add(1)
	}
	attempts := o.m.Attempts + 1
	if o.permanent {
		r.metrics.deadLettered.WithLabelValues(o.destLabel(), o.v.Reason.String()).Inc()
		r.logAttempt(slog.LevelError, "message failed permanently", o,
			slog.Int("attempts", attempts), slog.String("detail", "permanent fault, moving to DLQ"))
		return
	}
	r.metrics.deadLettered.WithLabelValues(o.destLabel(), errorhandling.ReasonPoisonMessage.String()).Inc()
	maxAttempts := r.cfg.Store.PolicyFor(o.m.Destination).MaxAttempts
	if !r.log.Enabled(context.Background(), slog.LevelError) {
		return
	}
	r.log.LogAttrs(context.Background(), slog.LevelError, "message dead-lettered",
		slog.String("message_id", o.m.ID.String()),
		slog.String("destination", o.m.Destination),
		slog.String("stream", o.m.Stream),
		slog.Int("attempts", attempts),
		slog.String("reason", errorhandling.ReasonPoisonMessage.String()),
		slog.String("last_reason", o.v.Reason.String()),
		slog.String("fingerprint", errorhandling.Fingerprint(o.err)),
		slog.String("error", o.errorText()),
		slog.String("detail", fmt.Sprintf("exceeded max retries (%d), moving to DLQ", maxAttempts)))
}

func idSet(ids []uuid.UUID) map[uuid.UUID]struct{} {
	if len(ids) == 0 {
		return nil
	}
	s := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		s[id] = struct{}{}
	}
	return s
}

// quarantineReadBack is how many of a claim's quarantined rows the relay
// reads back from the dead-letter queue (quarantined).
const quarantineReadBack = 16

// quarantined accounts for the rows a claim dead-lettered because the
// store could not decode them (store.Result.Quarantined): they are dead
// letters of this relay like the others, counted in Stats and
// dead_lettered_total (reason SerializationError), and told to
// Config.DeadLetters, whose OnEntryAdded and OnThresholdReached fire for
// them. The entry is read back from the store's queue, which holds what
// could be read of the row; hooks that take a Failure are not called,
// since no message could be decoded.
//
// It runs on the claim loop, so it reads back at most
// quarantineReadBack entries a claim: a flood of malformed rows costs the
// loop a bounded number of reads, and the entries past them are told with
// what the relay knows (the message id and the reason), under the
// destination label (unknown).
func (r *Relay) quarantined(ctx context.Context, ids []uuid.UUID) {
	reason := errorhandling.ReasonSerializationError.String()
	for i, id := range ids {
		r.stats.deadLettered.Add(1)
		var e *dlq.Entry
		if i < quarantineReadBack {
			es, err := r.store.DLQ().List(ctx, &dlq.Filters{MessageID: id.String(), OmitPayload: true})
			if err == nil && len(es) > 0 {
				e = es[len(es)-1]
			}
		}
		label := unknownDestinationLabel
		if e != nil {
			if d, ok := r.dests[e.Destination]; ok {
				label = d.name
				d.stats.deadLettered.Add(1)
			}
		}
		r.metrics.deadLettered.WithLabelValues(label, reason).Inc()
		if m := r.cfg.DeadLetters; m != nil {
			if e == nil {
				e = &dlq.Entry{MessageID: id.String(), Reason: errorhandling.ReasonSerializationError,
					FailureReason: reason, Status: dlq.StatusPending, FailureTime: r.clk.Now()}
			}
			r.callHook("DeadLetters", func() { m.Notify(context.Background(), e) })
		}
	}
}
