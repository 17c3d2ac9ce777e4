package rabbitinbox

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// streamOffsetArg is the consumer argument that says where a consumer of
// a stream queue starts, and the header that carries each delivery's
// offset in the stream.
const streamOffsetArg = "x-stream-offset"

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
//   - after a lost connection or channel, the offset after the last
//     delivery it handled (stored, found a duplicate, or rejected), which
//     it keeps in memory;
//   - at its first session (a program started again), the messages of the
//     last streamReplay of the stream, by the broker's clock: the inbox's
//     DedupWindow less a tenth of it (at most an hour), which leaves room
//     for the broker's and the database's clocks to differ and for the
//     broker to start at the beginning of a chunk. The messages received
//     already are dropped as duplicates; a receiver stopped for longer
//     than that loses what was published before it.
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
