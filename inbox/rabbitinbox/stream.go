package rabbitinbox

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// streamOffsetArg is the consumer argument that says where a consumer of
// a stream queue starts, and the header that carries each delivery's
// offset in the stream.
const streamOffsetArg = "x-stream-offset"

// cursorSaveEvery is how often a receiver on a stream queue saves its
// cursor in the inbox's store while it consumes (and once as each session
// ends): a receiver that crashed resumes at most that much of the stream
// before where it was, and drops it as duplicates.
const cursorSaveEvery = time.Second

// cursorTimeout bounds a cursor's save or load.
const cursorTimeout = 5 * time.Second

// maxReplayMargin caps how much shorter than the inbox's DedupWindow the
// replay of a first session is (a tenth of the window, at most an hour).
const maxReplayMargin = time.Hour

// streamStart returns the consumer arguments that say where a session
// starts on a stream queue, or nil once the queue is known to be of
// another type.
//
// A stream queue keeps its messages, whether consumed or not, and a
// consumer that does not say where to start gets only the messages
// published after it started: what was published while the receiver was
// stopped or disconnected was never received. AMQP 0-9-1 has no offset
// the broker keeps for a consumer, so the receiver chooses:
//
//   - the offset after the last delivery it handled (stored, found a
//     duplicate, or rejected), which it keeps in memory and saves in the
//     inbox's store as its cursor every cursorSaveEvery and as a session
//     ends (source "rabbitmq:" + the queue's name); at its first session
//     (a program started again) it reads the cursor back (loadCursor);
//   - at a first session with no cursor saved (a new receiver, or a store
//     that keeps none), the messages of the last streamReplay of the
//     stream, by the broker's clock: the inbox's DedupWindow less a tenth
//     of it (at most an hour), which leaves room for the broker's and the
//     database's clocks to differ and for the broker to start at the
//     beginning of a chunk. The messages received already are dropped as
//     duplicates.
func (r *Receiver) streamStart() amqp.Table {
	if r.notStream.Load() {
		return nil
	}
	if next := r.nextOffset.Load(); next > 0 {
		return amqp.Table{streamOffsetArg: next}
	}
	return amqp.Table{streamOffsetArg: fmt.Sprintf("%ds", int64(r.streamReplay()/time.Second))}
}

// streamReplay is how far back a first session on a stream queue starts.
func (r *Receiver) streamReplay() time.Duration {
	w := r.cfg.Inbox.DedupWindow()
	return max(w-min(w/10, maxReplayMargin), time.Second)
}

// handled records that the receiver is done with d: on a stream queue, the
// next session starts after it.
func (r *Receiver) handled(d *amqp.Delivery) {
	if off, ok := d.Headers[streamOffsetArg].(int64); ok && off >= 0 {
		r.nextOffset.Store(off + 1)
	}
}

// cursorSource names the receiver's cursor within its inbox:
// "rabbitmq:" and the queue's name, or "rabbitmq-hex:" and the name in
// hexadecimal when it is not valid UTF-8 without NUL (AMQP allows any
// bytes; a store keys text).
func (r *Receiver) cursorSource() string {
	q := r.cfg.Queue
	if !utf8.ValidString(q) || strings.ContainsRune(q, 0) {
		return "rabbitmq-hex:" + hex.EncodeToString([]byte(q))
	}
	return "rabbitmq:" + q
}

// loadCursor reads the receiver's saved cursor before its first session,
// when the queue may be a stream queue and the inbox's store keeps
// cursors: the session then starts at the offset it holds. When it cannot
// (the database down), consume asks whether the queue is a stream queue
// (isStream): if it is, the session ends and Run tries again, since
// starting from the replay instead could skip what a receiver stopped for
// longer had not received; if not, the session goes on without.
func (r *Receiver) loadCursor(ctx context.Context) error {
	if r.cursorLoaded.Load() || r.notStream.Load() || r.nextOffset.Load() > 0 || !r.cfg.Inbox.KeepsCursors() {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, cursorTimeout)
	defer cancel()
	next, ok, err := r.cfg.Inbox.Cursor(lctx, r.cursorSource())
	if err != nil {
		return fmt.Errorf("rabbitinbox: read the stream cursor: %w", err)
	}
	if ok && next > 0 {
		r.nextOffset.Store(next)
		r.savedOffset.Store(next)
	}
	r.cursorLoaded.Store(true)
	return nil
}

// saveCursor saves the offset after the last delivery handled, when it
// moved since the last save. A failed save is logged and tried again at
// the next: meanwhile a restart would resume further back, reading again
// what the inbox drops as duplicates.
func (r *Receiver) saveCursor(ctx context.Context) {
	next := r.nextOffset.Load()
	if next <= 0 || next == r.savedOffset.Load() || r.notStream.Load() || !r.cfg.Inbox.KeepsCursors() {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, cursorTimeout)
	defer cancel()
	if err := r.cfg.Inbox.SaveCursor(sctx, r.cursorSource(), next); err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log.LogAttrs(ctx, slog.LevelWarn, "saving the stream cursor failed; trying again",
				slog.String("queue", r.cfg.Queue), slog.String("error", err.Error()))
		}
		return
	}
	r.savedOffset.Store(next)
}
