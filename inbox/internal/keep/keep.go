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
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/inbox"
)

// Store stores msg in in, trying again every `every` while the inbox
// cannot store it at the moment. Before each wait it logs the failure,
// with where (the broker's name for the message), at WARN on the 1st,
// 2nd, 4th, 8th... try and DEBUG between, so that a store that stays down
// keeps saying so, less and less often. held, when not nil, is called
// every beat until Store returns (JetStream's InProgress, restarting the
// message's AckWait): while a try hangs (a database that stopped
// answering), with a warning at the first beat, and between tries, at its
// own pace rather than every `every`, which may be longer than the
// broker's wait. It returns nil, an error matching inbox.ErrInvalid, or
// the last error once ctx is done.
func Store(ctx context.Context, in *inbox.Inbox, msg inbox.Received, every time.Duration, log *slog.Logger,
	where slog.Attr, held func(), beat time.Duration) error {
	var failed atomic.Bool
	if beat <= 0 {
		beat = every
	}
	if held != nil {
		stop := heartbeat(ctx, beat, held, func() {
			if !failed.Load() {
				log.LogAttrs(ctx, slog.LevelWarn, "storing a received message is taking long; holding it",
					where, slog.Duration("after", beat))
			}
		})
		defer stop()
	}
	for tries := 1; ; tries++ {
		_, err := in.Receive(ctx, msg)
		if err == nil || errors.Is(err, inbox.ErrInvalid) || ctx.Err() != nil {
			return err
		}
		failed.Store(true)
		level := slog.LevelDebug
		if tries&(tries-1) == 0 {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "cannot store a received message; trying again",
			where, slog.Int("tries", tries), slog.Duration("after", every), slog.String("error", err.Error()))
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// heartbeat calls held every beat (first, then held, at the first beat)
// until stop, which waits for it to end, or ctx is done. A message held only by the
// receiver's memory said nothing to the broker before while a try to
// store it hung, and only once per retry delay during an outage: JetStream
// delivered it again each AckWait that ran out, spending its MaxDeliver,
// and gave up on it.
func heartbeat(ctx context.Context, beat time.Duration, held, first func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(beat)
		defer t.Stop()
		for beats := 1; ; beats++ {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if beats == 1 {
				first()
			}
			held()
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
