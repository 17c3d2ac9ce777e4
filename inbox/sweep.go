package inbox

import (
	"context"
	"log/slog"
)

// Sweep deletes the de-duplication records older than DedupWindow, in
// batches of at most SweepBatch (one statement each), while the batches
// come back full, and returns how many it deleted. Run calls it every
// SweepInterval. A fixed number of batches a sweep would cap the rate an
// inbox can receive at for good: past it, the records table grows without
// end.
func (in *Inbox) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := in.inbox.SweepReceived(ctx, in.name, in.cfg.DedupWindow, in.cfg.SweepBatch)
		total += n
		if err != nil {
			return total, err
		}
		if n < in.cfg.SweepBatch || ctx.Err() != nil {
			break
		}
	}
	in.metrics.swept(total)
	return total, nil
}

func (in *Inbox) sweepLoop(ctx context.Context) {
	if in.cfg.SweepInterval < 0 {
		return
	}
	for {
		t := in.clk.NewTimer(in.cfg.SweepInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		n, err := in.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			in.log.LogAttrs(ctx, slog.LevelWarn, "sweep of de-duplication records failed", slog.String("error", err.Error()))
		case n > 0:
			in.log.LogAttrs(ctx, slog.LevelDebug, "swept de-duplication records", slog.Int("deleted", n))
		}
	}
}
