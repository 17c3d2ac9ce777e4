// Package keep stores a message an inbox receiver took from a broker,
// keeping it while the inbox's database is down rather than giving it
// back: each give-back counts as a delivery (JetStream's MaxDeliver, a
// quorum queue's x-delivery-limit), and the broker drops a message that
// has used them up.
package keep

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/inbox"
)

// Store stores msg in in, trying again every `every` while the inbox
// cannot store it at the moment. Before each wait it logs the failure,
// with where (the broker's name for the message), at WARN on the 1st,
// 2nd, 4th, 8th... try and DEBUG between, so that a store that stays down
// keeps saying so, less and less often; then it calls held, when not nil
// (JetStream's InProgress, restarting the message's AckWait). It returns
// nil, an error matching inbox.ErrInvalid, or the last error once ctx is
// done.
func Store(ctx context.Context, in *inbox.Inbox, msg inbox.Received, every time.Duration, log *slog.Logger,
	where slog.Attr, held func()) error {
	for tries := 1; ; tries++ {
		_, err := in.Receive(ctx, msg)
		if err == nil || errors.Is(err, inbox.ErrInvalid) || ctx.Err() != nil {
			return err
		}
		level := slog.LevelDebug
		if tries&(tries-1) == 0 {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "cannot store a received message; trying again",
			where, slog.Int("tries", tries), slog.Duration("after", every), slog.String("error", err.Error()))
		if held != nil {
			held()
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
