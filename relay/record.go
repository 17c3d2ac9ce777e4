package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

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
