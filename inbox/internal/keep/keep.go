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
	"sync"
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
	var h *heart
	if held != nil {
		if beat <= 0 {
			beat = every
		}
		h = startHeart(ctx, beat, held, log, where)
		defer h.stop()
	}
	for tries := 1; ; tries++ {
		_, err := in.Receive(ctx, msg)
		if err == nil || errors.Is(err, inbox.ErrInvalid) || ctx.Err() != nil {
			return err
		}
		if h != nil {
			h.failed.Store(true)
		}
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

// heart calls held every beat while a message is being stored, until
// stop or its context is done. A message held only by the receiver's
// memory said nothing to the broker before while a try to store it hung,
// and only once per retry delay during an outage: JetStream delivered it
// again each AckWait that ran out, spending its MaxDeliver, and gave up
// on it.
//
// It is one timer, armed again after each beat, rather than a goroutine
// and a ticker: almost every store call ends long before the first beat,
// and then the heart cost a timer and nothing else.
type heart struct {
	ctx   context.Context
	beat  time.Duration
	held  func()
	log   *slog.Logger
	where slog.Attr
	// failed is set once a try to store the message failed: the warning
	// of the first beat is then said by the retry's own log.
	failed atomic.Bool
	timer  *time.Timer

	mu      sync.Mutex
	stopped bool
	beats   int
	// running counts the beats under way, for stop to wait for.
	running sync.WaitGroup
}

// startHeart arms the first beat of a heart.
func startHeart(ctx context.Context, beat time.Duration, held func(), log *slog.Logger, where slog.Attr) *heart {
	h := &heart{ctx: ctx, beat: beat, held: held, log: log, where: where}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(beat, h.fire)
	return h
}

// fire is one beat: held, with a warning at the first one unless a try
// already failed, then the next beat armed.
func (h *heart) fire() {
	h.mu.Lock()
	if h.stopped || h.ctx.Err() != nil {
		h.mu.Unlock()
		return
	}
	h.beats++
	first := h.beats == 1
	h.running.Add(1)
	h.mu.Unlock()
	defer h.running.Done()

	if first && !h.failed.Load() {
		h.log.LogAttrs(h.ctx, slog.LevelWarn, "storing a received message is taking long; holding it",
			h.where, slog.Duration("after", h.beat))
	}
	h.held()

	h.mu.Lock()
	if !h.stopped {
		h.timer.Reset(h.beat)
	}
	h.mu.Unlock()
}

// stop ends the beats and waits for one under way to end: once it
// returns, held is not called again.
func (h *heart) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.running.Wait()
}
