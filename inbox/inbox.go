package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// Handler handles a message inside a transaction on the store's database.
// What it writes with tx (and the outbox messages it enqueues with
// tx.Enqueue) is committed together with the message's completion, or not
// at all: the inbox commits tx when the handler returns nil, and rolls it
// back when it returns an error, which is classified as a failed attempt.
// tx's Commit returns ErrTxManaged and commits nothing; a handler that
// rolls tx back itself and returns nil fails its attempt, since nothing
// it did is kept (Driver's transaction is the same one: leave it open).
//
// On SQLite, tx holds the store's single writer connection while the
// handler runs: the relay's own writes wait for it (at most the store's
// lock wait), so keep such handlers short and do slow calls elsewhere.
type Handler func(ctx context.Context, tx store.Tx, msg *Message) error

// Func handles a message without a transaction, for effects outside the
// store's database. It is called at least once per message: again after a
// crash between its return and the relay recording the completion.
type Func func(ctx context.Context, msg *Message) error

// ErrAlreadyRun is returned by Run when the Inbox has run before.
var ErrAlreadyRun = errors.New("inbox: Run called more than once")

// Inbox stores received messages once and runs their handlers. Create it
// with New, register handlers with Handle and HandleFunc, feed it with
// receivers (Receive, HTTPHandler, the natsinbox and rabbitinbox
// packages) and start it with Run. Its methods are safe for concurrent
// use.
type Inbox struct {
	cfg     Config
	name    string
	dest    string
	store   store.Store
	inbox   store.Inbox
	relay   *relay.Relay
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics
	started atomic.Bool

	mu       sync.RWMutex
	handlers map[string]handler
	// noHandlerWarned are the types warned about for want of a handler
	// (firstNoHandler).
	noHandlerWarned map[string]bool

	// afterCommit, when set (tests), runs after a transactional handler's
	// commit and before the relay hears of it.
	afterCommit func(msg *Message)
}

// handler is one registered handler: tx or fn is set.
type handler struct {
	tx Handler
	fn Func
}

// New returns the inbox cfg.Name on s, which must implement store.Inbox
// (store/sqlite and store/postgres do, from the migrations that create the
// de-duplication table). cfg has its defaults applied and is validated;
// the error names the first bad field. The relay that Run starts is made
// here, and the metrics registered when cfg.Metrics is set.
func New(s store.Store, cfg Config) (*Inbox, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	}
	si, ok := s.(store.Inbox)
	if !ok {
		return nil, fmt.Errorf("%w: store %T does not implement store.Inbox", ErrInvalidConfig, s)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := &Inbox{
		cfg: cfg, name: cfg.Name, dest: Destination(cfg.Name), store: s, inbox: si,
		clk: cfg.Relay.Clock, log: cfg.Relay.Logger.With(slog.String("inbox", cfg.Name)),
		handlers: map[string]handler{},
	}
	rc := cfg.Relay
	rc.Destinations = map[string]relay.Destination{in.dest: in.Destination()}
	// The store's policies may be for the outbox relay sharing it.
	rc.AllowForeignPolicies = true
	rc.UnknownDestination = relay.IgnoreUnknown
	r, err := relay.New(s, rc)
	if err != nil {
		return nil, fmt.Errorf("inbox %q: %w", cfg.Name, err)
	}
	in.relay = r
	if in.metrics, err = newMetrics(cfg.Metrics, cfg.Name); err != nil {
		return nil, fmt.Errorf("inbox %q: metrics: %w", cfg.Name, err)
	}
	return in, nil
}

// Name returns the inbox's name.
func (in *Inbox) Name() string { return in.name }

// DestinationName returns the destination of the inbox's rows,
// Destination(Name()).
func (in *Inbox) DestinationName() string { return in.dest }

// Destination returns the relay destination that runs the inbox's
// handlers, with Config.Handling's settings: add it under
// DestinationName() to a relay of your own instead of calling Run.
func (in *Inbox) Destination() relay.Destination {
	d := in.cfg.Handling
	d.Transport = transport.Func(in.deliver)
	return d
}

// Limits returns the bounds Receive holds messages to (Config.Limits,
// defaults applied). A receiver leaves out the headers past
// MaxHeaders and MaxHeaderBytes rather than have Receive refuse the whole
// message.
func (in *Inbox) Limits() outbox.Limits { return in.cfg.Limits }

// DedupWindow returns how long the inbox remembers a source message id
// (Config.DedupWindow, default applied): a receiver whose source may
// deliver a message again later than that refuses to start.
func (in *Inbox) DedupWindow() time.Duration { return in.cfg.DedupWindow }

// ErrNoCursors is returned by SaveCursor and Cursor when the inbox's store
// keeps no cursors (it does not implement store.InboxCursors).
var ErrNoCursors = errors.New("inbox: the store keeps no cursors")

// KeepsCursors reports whether the inbox's store keeps receivers' cursors
// (store.InboxCursors): SaveCursor and Cursor work.
func (in *Inbox) KeepsCursors() bool {
	_, ok := in.store.(store.InboxCursors)
	return ok
}

// SaveCursor records next, the position after the last message of source
// the receiver has handled, for a receiver of a source that leaves the
// consumer to say where it starts (rabbitinbox on a stream queue): started
// again, it resumes there. source names the source within the inbox.
// source must be valid UTF-8 without NUL, at most maxCursorSource bytes.
func (in *Inbox) SaveCursor(ctx context.Context, source string, next int64) error {
	c, err := in.cursors(source)
	if err != nil {
		return err
	}
	return c.SaveInboxCursor(ctx, in.name, source, next)
}

// cursors returns the store's cursors, or why source cannot have one.
func (in *Inbox) cursors(source string) (store.InboxCursors, error) {
	c, ok := in.store.(store.InboxCursors)
	if !ok {
		return nil, ErrNoCursors
	}
	return c, checkCursorSource(source)
}

// maxCursorSource is the longest source name a cursor takes, in bytes.
const maxCursorSource = 1024

// checkCursorSource refuses a source name a store cannot key a row on.
func checkCursorSource(source string) error {
	switch {
	case source == "":
		return fmt.Errorf("%w: cursor source is empty", ErrInvalidConfig)
	case len(source) > maxCursorSource:
		return fmt.Errorf("%w: cursor source is %d bytes, over %d", ErrInvalidConfig, len(source), maxCursorSource)
	case !utf8.ValidString(source) || strings.ContainsRune(source, 0):
		return fmt.Errorf("%w: cursor source %q is not valid UTF-8 without NUL", ErrInvalidConfig, source)
	}
	return nil
}

// Cursor returns the position SaveCursor last recorded for source; ok is
// false when none was.
func (in *Inbox) Cursor(ctx context.Context, source string) (next int64, ok bool, err error) {
	c, err := in.cursors(source)
	if err != nil {
		return 0, false, err
	}
	return c.InboxCursor(ctx, in.name, source)
}

// Relay returns the relay Run starts (for Stats and Breaker).
func (in *Inbox) Relay() *relay.Relay { return in.relay }

// Handle registers a transactional handler for messages of type typ. It
// panics when typ is empty or already has a handler, or h is nil, as
// http.ServeMux does: a registration mistake is a bug.
func (in *Inbox) Handle(typ string, h Handler) {
	if h == nil {
		panic("inbox: nil handler for " + typ)
	}
	in.register(typ, handler{tx: h})
}

// HandleFunc registers a handler without a transaction for messages of
// type typ. It panics like Handle.
func (in *Inbox) HandleFunc(typ string, f Func) {
	if f == nil {
		panic("inbox: nil handler for " + typ)
	}
	in.register(typ, handler{fn: f})
}

func (in *Inbox) register(typ string, h handler) {
	if typ == "" {
		panic("inbox: empty message type")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, dup := in.handlers[typ]; dup {
		panic(fmt.Sprintf("inbox %q: type %q already has a handler", in.name, typ))
	}
	in.handlers[typ] = h
}

func (in *Inbox) handler(typ string) (handler, bool) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	h, ok := in.handlers[typ]
	return h, ok
}

// Receive stores r once: it writes r's row and its de-duplication record
// in one transaction and returns false, or, when r.ID was received within
// the DedupWindow, writes nothing and returns true. A receiver
// acknowledges the source when Receive returns no error, duplicate or
// not. An error matching ErrInvalid means r can never be stored as a
// message: it is kept as a dead letter of the inbox's destination, with
// why (see park), and the receiver refuses it. Any other error is the
// store's, and the source should deliver r again later.
func (in *Inbox) Receive(ctx context.Context, r Received) (duplicate bool, err error) {
	source := r.source()
	if checkPrintable(source, MaxSourceLen) != "" {
		// Not a label the metrics can carry (invalid UTF-8 made their
		// client panic), and refused below.
		source = invalidSource
	}
	m, err := r.row(in.name, in.cfg.Limits)
	if err == nil {
		var dup bool
		dup, err = in.inbox.Receive(ctx, in.name, r.ID, m)
		switch {
		case errors.Is(err, outbox.ErrInvalidMessage):
			// the store cannot keep it, now or ever: refused, not retried
			err = fmt.Errorf("%w: inbox %q: receive %q: %w", ErrInvalid, in.name, r.ID, err)
		case errors.Is(err, store.ErrIDReused):
			// another message under a used id: dropped as a duplicate,
			// it was lost without a word
			err = in.reusedID(ctx, source, r.ID, err)
		case err == nil:
			return in.received(ctx, source, r.ID, dup), nil
		}
	}
	if errors.Is(err, ErrInvalid) {
		if perr := in.park(ctx, &r, source, err); perr != nil {
			return false, perr
		}
		in.metrics.rejected(source)
		return false, err
	}
	return false, fmt.Errorf("inbox %q: receive %q: %w", in.name, r.ID, err)
}

// ErrIDReused is matched by Receive's error for a message whose id was
// received before for a message of another type or payload: not a
// redelivery, but another message under a used id (a source's counter
// started again, two publishers numbering alike). It also matches
// ErrInvalid, so that receivers refuse it, and store.ErrIDReused; the
// message is kept as a dead letter of the inbox naming the row the id
// was first stored as, and counted (backstop_inbox_reused_ids_total).
var ErrIDReused = errors.New("inbox: message id received before for another message")

// reusedID is the refusal of a message whose id was received before for
// another message (err: a store.IDReusedError), said at WARN with both
// ids and counted.
func (in *Inbox) reusedID(ctx context.Context, source, id string, err error) error {
	in.metrics.reusedID(source)
	attrs := []slog.Attr{slog.String("source", source), slog.String("source_id", id)}
	var e *store.IDReusedError
	if errors.As(err, &e) && e.RowID != uuid.Nil {
		attrs = append(attrs, slog.String("first_row_id", e.RowID.String()))
	}
	in.log.LogAttrs(ctx, slog.LevelWarn, "message id received before for another message: refused and kept as a dead letter", attrs...)
	return fmt.Errorf("%w: %w: %w", ErrInvalid, ErrIDReused, err)
}

// received counts a message Receive stored, or dropped as a duplicate.
func (in *Inbox) received(ctx context.Context, source, id string, dup bool) bool {
	if dup {
		in.metrics.duplicate(source)
		in.log.LogAttrs(ctx, slog.LevelDebug, "duplicate dropped",
			slog.String("source", source), slog.String("source_id", id))
		return true
	}
	in.metrics.received(source)
	return false
}

// invalidSource labels the metrics of a message whose Received.Source
// is not one (row refuses it).
const invalidSource = "invalid"

// Run runs the inbox's handlers until ctx is done: the relay over the
// inbox's destination and, unless Config.SweepInterval is negative, the
// sweep of expired de-duplication records. It returns the relay's Run
// error (nil after a graceful stop). An Inbox runs once.
func (in *Inbox) Run(ctx context.Context) error {
	if !in.started.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	sweepCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.sweepLoop(sweepCtx)
	}()
	err := in.relay.Run(ctx)
	stop()
	<-done
	return err
}
