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
// (JetStream's InProgress, restarting the message's AckWait). It calls
// held every `every` too while a try has not returned (a database that
// hangs), with a warning at the first. It returns nil, an error matching
// inbox.ErrInvalid, or the last error once ctx is done.
func Store(ctx context.Context, in *inbox.Inbox, msg inbox.Received, every time.Duration, log *slog.Logger,
	where slog.Attr, held func()) error {
	for tries := 1; ; tries++ {
		err := try(ctx, in, msg, every, log, where, held)
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

// try makes one try to store msg, calling held every `every` while it has
// not returned: a try that hangs (a database that stopped answering, a
// network that drops its packets) said nothing to the broker before, and
// JetStream delivered the message again each AckWait, spending its
// MaxDeliver, until it gave up on a message held only in memory.
func try(ctx context.Context, in *inbox.Inbox, msg inbox.Received, every time.Duration, log *slog.Logger,
	where slog.Attr, held func()) error {
	if held == nil {
		_, err := in.Receive(ctx, msg)
		return err
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for beats := 1; ; beats++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if beats == 1 {
				log.LogAttrs(ctx, slog.LevelWarn, "storing a received message is taking long; holding it",
					where, slog.Duration("after", every))
			}
			held()
		}
	}()
	_, err := in.Receive(ctx, msg)
	close(stop)
	<-done
	return err
}
