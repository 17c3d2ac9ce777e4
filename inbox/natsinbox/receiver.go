// Package natsinbox receives messages from a NATS JetStream consumer into
// an inbox (package inbox), acknowledging each only once it is stored.
//
// The message id, the inbox's de-duplication key, is the Nats-Msg-Id
// header, which Backstop's NATS transport sets to the outbox message id;
// a message without one is identified by its stream, stream sequence and
// the time the stream stored it ("ORDERS:42:1795454266199941992"), which a
// redelivery keeps and a stream created again does not. The type is the Backstop-Type
// header, else the subject; the ordering key the Backstop-Stream header.
// The other headers are kept (their first value, names canonical:
// traceparent and tracestate in lower case, their W3C names), except the
// Nats-* ones, Backstop's own, a malformed traceparent and those a
// message cannot carry.
//
// Each message is stored, then acknowledged: a redelivery after a lost
// acknowledgement or a crash is recognised and dropped. A message the
// inbox cannot store at the moment (its database is down) is held and
// tried again every NakDelay until it is stored, its AckWait restarted
// meanwhile (every NakDelay, or a third of the AckWait when sooner, also
// while a try hangs on a database that stopped answering), so that the
// outage does not spend the consumer's MaxDeliver
// (JetStream drops a message that has used it up); a message it can
// never store (ErrInvalid: no type, a control character in its type or
// stream, over the size limit) is terminated; a header it cannot carry is
// left out, with a warning, and the message kept. Messages are received
// one at a time, in the order the consumer delivers them; for the
// streams' order to survive redeliveries give the consumer MaxAckPending
// 1.
//
// A message with an empty payload and a Status header never reaches the
// receiver: nats.go takes it for a status message of the server (a
// heartbeat, or an error that ends the pull) and drops it. Backstop's
// NATS transport refuses to publish one; one published by another program
// is redelivered until the consumer's MaxDeliver runs out, holding the
// messages after it that long under MaxAckPending 1. Give such consumers a
// MaxDeliver.
package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/headers"
	"github.com/backstophq/backstop/inbox/internal/keep"
	"github.com/backstophq/backstop/inbox/internal/liveness"
	"github.com/backstophq/backstop/inbox/internal/resume"
	"github.com/backstophq/backstop/outbox"
)

// The headers read besides Nats-Msg-Id: those Backstop's NATS transport
// sets.
const (
	HeaderType   = "Backstop-Type"
	HeaderStream = "Backstop-Stream"
)

// DefaultNakDelay is how long the receiver waits before it tries again
// to store a message the inbox could not store, when Config.NakDelay is
// zero.
const DefaultNakDelay = time.Second

// DefaultRetryDelay is the first wait before reading the consumer again
// after it went away (deleted); it doubles up to DefaultMaxRetryDelay.
const (
	DefaultRetryDelay    = 100 * time.Millisecond
	DefaultMaxRetryDelay = 30 * time.Second
)

// Config configures a Receiver.
type Config struct {
	// Inbox is where messages go. Required.
	Inbox *inbox.Inbox
	// Consumer is the JetStream consumer to read, with explicit acks
	// (jetstream.AckExplicitPolicy: Run refuses AckNone and AckAll, which
	// lose a message taken and not yet stored), delivering payloads (Run
	// refuses HeadersOnly); a durable one so that a restart
	// resumes where it stopped. Its AckWait is how soon a message whose
	// receiver died unacknowledged is delivered again; it, and each
	// BackOff step, must be shorter than the inbox's DedupWindow (Run
	// refuses the consumer otherwise). Required.
	Consumer jetstream.Consumer
	// NakDelay is how long the receiver waits before it tries again to
	// store a message the inbox could not store at the moment (its
	// database down). It holds the message meanwhile, restarting its
	// AckWait every NakDelay, or every third of the consumer's AckWait
	// (or shortest BackOff step) when that is sooner, also while a try
	// hangs, so that an outage does not use up the consumer's
	// MaxDeliver. Zero means DefaultNakDelay.
	NakDelay time.Duration
	// RetryDelay is the first wait before reading the consumer again once
	// it went away under the receiver (an operator deleted it, the stream
	// was recreated): the receiver keeps trying, doubling the wait up to
	// MaxRetryDelay, and goes on when a consumer of the name is back. It
	// never creates one itself: a new durable consumer would deliver the
	// stream from its start. Zero means DefaultRetryDelay (100 ms).
	RetryDelay time.Duration
	// MaxRetryDelay caps the wait between tries. Zero means
	// DefaultMaxRetryDelay (30 s).
	MaxRetryDelay time.Duration
	// StreamKey, when set, returns a message's ordering key instead of
	// its Backstop-Stream header (such as another header, or the
	// subject); "" means no ordering.
	StreamKey func(m jetstream.Msg) string
	// Logger receives the receiver's records. Nil means slog.Default().
	Logger *slog.Logger
}

// Receiver reads a JetStream consumer into an inbox.
type Receiver struct {
	cfg Config
	log *slog.Logger

	// Test hooks: afterStore runs once a message is stored (or found a
	// duplicate), before it is acknowledged; ack, when set, decides
	// whether to acknowledge it (false: Nak, so it comes again).
	// reading runs when an iterator over the consumer starts, retrying
	// before Run reads the consumer again.
	afterStore func(m jetstream.Msg)
	ack        func(m jetstream.Msg) bool
	reading    func()
	retrying   func()

	// beat is heldBeat's for the consumer as read last.
	beat atomic.Int64

	// state is what Reading reports.
	state liveness.State
}

// errNotStarted is Reading's answer before Run's first read starts.
var errNotStarted = errors.New("natsinbox: not reading yet")

// Reading reports whether the receiver is reading its consumer now, and
// when it is not, why: the error that ended its last read (the consumer
// deleted, not found), or that none has started yet. A read goes on
// through a lost connection (it recovers once the connection is back):
// the connection's own state (nats.Conn.IsConnected) says that. For
// readiness checks and status pages.
func (r *Receiver) Reading() (bool, error) {
	return r.state.Get(errNotStarted)
}

func (r *Receiver) setReading(live bool, why error) {
	r.state.Set(live, why)
}

// New returns a Receiver; the error names a missing field.
func New(cfg Config) (*Receiver, error) {
	switch {
	case cfg.Inbox == nil:
		return nil, errors.New("natsinbox: Config.Inbox is required")
	case cfg.Consumer == nil:
		return nil, errors.New("natsinbox: Config.Consumer is required")
	case cfg.NakDelay < 0:
		return nil, fmt.Errorf("natsinbox: Config.NakDelay must not be negative, got %s", cfg.NakDelay)
	case cfg.RetryDelay < 0:
		return nil, fmt.Errorf("natsinbox: Config.RetryDelay must not be negative, got %s", cfg.RetryDelay)
	case cfg.MaxRetryDelay < 0:
		return nil, fmt.Errorf("natsinbox: Config.MaxRetryDelay must not be negative, got %s", cfg.MaxRetryDelay)
	}
	if cfg.NakDelay == 0 {
		cfg.NakDelay = DefaultNakDelay
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = DefaultMaxRetryDelay
	}
	cfg.MaxRetryDelay = max(cfg.MaxRetryDelay, cfg.RetryDelay)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Receiver{cfg: cfg, log: cfg.Logger.With(slog.String("inbox", cfg.Inbox.Name()), slog.String("source", "nats"))}, nil
}

// Run receives messages until ctx is done, then returns nil. It returns an
// error when its first read of the consumer fails in a way no retry cures
// (IsPermanent: the consumer or its stream missing, a consumer setting it
// refuses, the server refusing the request); one that fails because the
// server cannot be reached or answered (the connection down, a timeout,
// JetStream not available yet) is tried again like any later one, so that
// a server down when the receiver starts is read once it is back. A
// consumer that goes away under it (deleted), or that cannot be read, is
// read again after Config.RetryDelay, doubling up to MaxRetryDelay while
// it stays away, with one warning for the outage (the tries after it are
// logged at debug level) and a record at info level when reading starts
// again; Reading says meanwhile why it is not reading. When ctx is done, the messages it has taken
// from the consumer and not stored are given back (Nak), so that the next
// receiver has them without waiting for the consumer's AckWait.
func (r *Receiver) Run(ctx context.Context) error {
	return resume.Run(ctx, resume.Config{
		Delay: r.cfg.RetryDelay, MaxDelay: r.cfg.MaxRetryDelay,
		Log: r.log, Message: "not reading the consumer; trying again", Retrying: r.retrying,
		Permanent: IsPermanent,
	}, r.read)
}

// read receives from one iterator over the consumer until ctx is done or
// the iterator ends (the consumer deleted), calling up once it started.
// It reports whether the iterator started, and why it ended.
func (r *Receiver) read(ctx context.Context, up func()) (started bool, err error) {
	defer func() {
		why := err
		if why == nil {
			why = errors.New("natsinbox: stopped")
		}
		r.setReading(false, why)
	}()
	// An iterator over a consumer that is not there does not fail: it
	// waits out its pull (30 s). Asking first makes a retry quick.
	info, err := r.cfg.Consumer.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("natsinbox: consumer: %w", err)
	}
	if p := info.Config.AckPolicy; p != jetstream.AckExplicitPolicy {
		// AckNone takes a message for acknowledged once sent: one held
		// through a store outage, given back at a stop or in hand at a
		// crash would never come again. AckAll acknowledges, with a later
		// message, the earlier ones given back and not yet stored.
		return false, permanent(fmt.Errorf("natsinbox: consumer %q has AckPolicy %s, want %s: a message taken and not yet stored "+
			"(held through a store outage, given back at a stop, in hand at a crash) would be lost", info.Name, p, jetstream.AckExplicitPolicy))
	}
	if info.Config.HeadersOnly {
		return false, permanent(fmt.Errorf("natsinbox: consumer %q is HeadersOnly: it delivers no payload, and every message would be stored "+
			"and acknowledged without its content", info.Name))
	}
	if wait, window := longestAckWait(info.Config), r.cfg.Inbox.DedupWindow(); wait >= window {
		return false, permanent(fmt.Errorf("natsinbox: consumer %q waits up to %s for an acknowledgement (AckWait, BackOff), not less than the inbox's DedupWindow (%s): "+
			"a message whose acknowledgement was lost would come again after its id was forgotten, and be handled twice",
			info.Name, wait, window))
	}
	r.beat.Store(int64(heldBeat(r.cfg.NakDelay, info.Config)))
	opts, err := pullOpts(info.Name, info.Config)
	if err != nil {
		return false, err
	}
	it, err := r.cfg.Consumer.Messages(opts...)
	if err != nil {
		return false, fmt.Errorf("natsinbox: %w", err)
	}
	// Drain, not Stop: the messages the iterator holds stay readable,
	// to be given back.
	stop := context.AfterFunc(ctx, it.Drain)
	defer stop()
	defer it.Stop()
	r.setReading(true, nil)
	up()
	if r.reading != nil {
		r.reading()
	}
	lost := errors.New("natsinbox: the consumer's iterator closed")
	for {
		m, err := it.Next()
		switch {
		case ctx.Err() != nil:
			giveBack(it, m)
			return true, nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return true, lost
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return true, fmt.Errorf("natsinbox: %w", err)
		case err != nil:
			// Missed heartbeats and the like: the iterator recovers.
			r.log.LogAttrs(ctx, slog.LevelDebug, "consumer read failed", slog.String("error", err.Error()))
			lost = fmt.Errorf("natsinbox: the consumer's iterator closed after: %w", err)
			continue
		}
		if !r.receive(ctx, m) {
			// Stopped before it could store m.
			giveBack(it, m)
			return true, nil
		}
	}
}

// pullBatch is how many messages a pull asks for, unless the consumer
// takes fewer (MaxRequestBatch).
const pullBatch = 64

// pullOpts are the options of the iterator over consumer name, whose
// configuration is c. Its pulls keep within the consumer's limits on
// them: the server refuses a pull asking for more messages than
// MaxRequestBatch or waiting longer than MaxRequestExpires, and the
// iterator, told only that the pull failed, sent the same one again for
// ever: the receiver read nothing, with nothing said above debug level.
// A MaxRequestExpires under the client's shortest pull (1 s) is an error
// naming it.
func pullOpts(name string, c jetstream.ConsumerConfig) ([]jetstream.PullMessagesOpt, error) {
	batch := pullBatch
	if c.MaxRequestBatch > 0 {
		batch = min(batch, c.MaxRequestBatch)
	}
	opts := []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(batch)}
	if exp := c.MaxRequestExpires; exp > 0 && exp < jetstream.DefaultExpires {
		if exp < minPullExpiry {
			return nil, permanent(fmt.Errorf("natsinbox: consumer %q has MaxRequestExpires %s: a pull waits at least %s", name, exp, minPullExpiry))
		}
		opts = append(opts, jetstream.PullExpiry(exp))
	}
	return opts, nil
}

// minPullExpiry is the shortest wait of a pull the client sends.
const minPullExpiry = time.Second

// drainWait bounds the wait for each message the iterator still holds
// when the receiver stops (a server gone away never ends the drain).
const drainWait = time.Second

// giveBack refuses (Nak) m, when not nil, and the messages left in the
// draining iterator it: taken from the consumer and not stored, they would
// otherwise stay unacknowledged until the consumer's AckWait, holding its
// later messages (MaxAckPending) from the next receiver all that time.
// The refusals wait for the drain to end: the server delivers a message
// refused earlier at once again, to the iterator's pull, which it keeps
// until it hears that nobody listens. Even after Stop it may not have
// heard yet: a message refused at once went to the stopped iterator's pull
// and came to the next receiver only after AckWait (seen when a receiver
// stopped while its store was down). Refused with giveBackDelay, it comes
// again once the server has forgotten that pull.
func giveBack(it jetstream.MessagesContext, m jetstream.Msg) {
	var held []jetstream.Msg
	for m != nil {
		held = append(held, m)
		m, _ = it.Next(jetstream.NextMaxWait(drainWait))
	}
	it.Stop()
	for _, m := range held {
		_ = m.NakWithDelay(giveBackDelay)
	}
}

// giveBackDelay is how long after a receiver stops the messages it gave
// back are delivered again (giveBack).
const giveBackDelay = time.Second

// receive stores m and acknowledges it, or terminates it when it can
// never be stored. It returns false when ctx ended before m could be
// stored: m is the caller's to give back.
func (r *Receiver) receive(ctx context.Context, m jetstream.Msg) bool {
	msg, dropped, err := received(m, r.cfg.Inbox.Limits())
	if len(dropped) > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "headers left out: a message cannot carry them",
			slog.String("subject", m.Subject()), slog.String("message_id", outbox.CleanText(msg.ID, 100)),
			slog.Any("headers", headers.CleanNames(dropped)))
	}
	if err == nil && r.cfg.StreamKey != nil {
		msg.Stream = r.cfg.StreamKey(m)
	}
	if err == nil {
		err = r.store(ctx, m, msg)
	}
	switch {
	case errors.Is(err, inbox.ErrInvalid):
		r.log.LogAttrs(ctx, slog.LevelWarn, "message refused: it cannot be stored",
			slog.String("subject", m.Subject()), slog.String("error", err.Error()))
		if err := m.Term(); err != nil {
			r.log.LogAttrs(ctx, slog.LevelDebug, "term failed", slog.String("error", err.Error()))
		}
		return true
	case err != nil:
		return false
	}
	if r.afterStore != nil {
		r.afterStore(m)
	}
	if r.ack != nil && !r.ack(m) {
		_ = m.Nak()
		return true
	}
	if err := m.Ack(); err != nil {
		// It comes again after AckWait and is dropped as a duplicate.
		r.log.LogAttrs(ctx, slog.LevelDebug, "ack failed", slog.String("error", err.Error()))
	}
	return true
}

// store stores msg, the inbox's form of m. While the inbox cannot store
// it at the moment (its database is down), it tries again every NakDelay
// and keeps m meanwhile, restarting its AckWait (InProgress): a Nak would
// spend one of the consumer's MaxDeliver deliveries on each try, and
// JetStream drops a message that has used them up. It returns nil, an
// error matching inbox.ErrInvalid, or the last error once ctx is done.
func (r *Receiver) store(ctx context.Context, m jetstream.Msg, msg inbox.Received) error {
	return keep.Store(ctx, r.cfg.Inbox, msg, r.cfg.NakDelay, r.log, slog.String("subject", m.Subject()), func() {
		if err := m.InProgress(); err != nil {
			r.log.LogAttrs(ctx, slog.LevelDebug, "in-progress ack failed", slog.String("error", err.Error()))
		}
	}, time.Duration(r.beat.Load()))
}

// longestAckWait is the longest the consumer waits for an acknowledgement
// before it delivers a message again: its AckWait, or its longest BackOff
// step.
func longestAckWait(c jetstream.ConsumerConfig) time.Duration {
	return max(c.AckWait, slices.Max(append([]time.Duration{0}, c.BackOff...)))
}

// heldBeat is how often the receiver restarts the AckWait of a message it
// holds (store): every NakDelay, or a third of the consumer's shortest
// wait for an acknowledgement (AckWait, or a BackOff step) when that is
// sooner. Once per NakDelay, a consumer whose AckWait was not longer saw
// it run out between two tries and delivered the message again, spending
// MaxDeliver through a store outage.
func heldBeat(nakDelay time.Duration, c jetstream.ConsumerConfig) time.Duration {
	beat := nakDelay
	for _, wait := range append([]time.Duration{c.AckWait}, c.BackOff...) {
		if wait > 0 {
			beat = min(beat, wait/3)
		}
	}
	return max(beat, time.Millisecond)
}

// received maps a JetStream message to the inbox's form, and names the
// headers it left out.
func received(m jetstream.Msg, limits outbox.Limits) (inbox.Received, []string, error) {
	h := m.Headers()
	id := h.Get(jetstream.MsgIDHeader)
	if id == "" {
		meta, err := m.Metadata()
		if err != nil {
			return inbox.Received{}, nil, fmt.Errorf("%w: no Nats-Msg-Id and no metadata: %v", inbox.ErrInvalid, err)
		}
		// The stream's sequence alone is not enough: a stream deleted and
		// created again numbers its messages from 1 again, and new
		// messages would be dropped as duplicates of old ones for the
		// whole DedupWindow. The time the stream stored the message is
		// kept by a redelivery and differs in the new stream.
		id = fmt.Sprintf("%s:%d:%d", meta.Stream, meta.Sequence.Stream, meta.Timestamp.UnixNano())
	}
	typ := h.Get(HeaderType)
	if typ == "" {
		typ = m.Subject()
	}
	kept, dropped := keptHeaders(h, limits)
	return inbox.Received{
		ID: id, Type: typ, Stream: h.Get(HeaderStream), Payload: m.Data(),
		Headers: kept, Source: "nats",
	}, dropped, nil
}

// keptHeaders are the headers of the message's own, first values, less
// those a message cannot carry (outbox.CheckHeader: a control character,
// a name that is not a token, a second name differing only in case),
// which it names: one odd header of another program's must not lose the
// whole message, as it did (terminated, never stored).
func keptHeaders(h nats.Header, limits outbox.Limits) (map[string]string, []string) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	kept := headers.Within(limits)
	for _, k := range names {
		vs := h[k]
		if len(vs) == 0 || headers.HasPrefixFold(k, "nats-") || headers.HasPrefixFold(k, "backstop-") {
			continue
		}
		kept.Add(k, vs[0])
	}
	return kept.Headers, kept.Dropped
}
