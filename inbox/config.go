package inbox

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultDedupWindow   = 7 * 24 * time.Hour
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 1000
	DefaultNoHandlerWait = time.Hour
	// NoHandlerRetry is how long an instance with no handler for a
	// message's type gives the message back for (see
	// Config.NoHandlerWait).
	NoHandlerRetry = 10 * time.Second
	// MaxNameLen is the longest inbox name, in bytes.
	MaxNameLen = 100
	// MaxIDLen is the longest source message id, in bytes.
	MaxIDLen = 512
	// MinDedupWindow is the shortest DedupWindow New accepts: a source
	// redelivers after its own wait for an acknowledgement (seconds at
	// least), and a window written as a bare number (3600, meaning an
	// hour) is nanoseconds, which remembered no id at all.
	MinDedupWindow = time.Minute
	// MinSweepInterval is the shortest positive SweepInterval New
	// accepts, so that a typo cannot turn the sweep into a busy loop
	// against the database.
	MinSweepInterval = time.Second
)

// DestinationPrefix starts the destination of every inbox's rows.
const DestinationPrefix = "inbox:"

// Destination returns the destination of the rows of the inbox named
// name, such as "inbox:orders": the key of its policy in the store's
// Config.Policies and of its breaker and metrics in the relay.
func Destination(name string) string { return DestinationPrefix + name }

// Config configures an Inbox. Every zero field means the default its
// comment gives; New applies the defaults and then validates, returning an
// error that names the first bad field.
type Config struct {
	// Name names the inbox: its rows' destination is Destination(Name).
	// Required: 1 to MaxNameLen bytes of a-z, A-Z, 0-9, '.', '_' and '-'.
	Name string

	// Relay configures the relay that Run starts to run the handlers
	// (workers, polling, leases, shutdown, logger, metrics, clock). Its
	// Destinations must be empty and its UnknownDestination is ignored:
	// the relay serves the inbox's destination only. A nil Classifier
	// means errorhandling.NewErrorClassifier(UnknownIsTransient()): an
	// error nobody classified is retried and charged to the message.
	Relay relay.Config

	// Handling says how handlers are called: their in-process retries,
	// breaker, timeout and concurrency, with relay.Destination's defaults.
	// Its Transport must be nil (the inbox's handlers are the transport).
	Handling relay.Destination

	// DedupWindow is how long a source message id is remembered after it
	// was received: a redelivery within the window is dropped as a
	// duplicate. It must be longer than the longest time the source may
	// redeliver a message. An id whose message is still in the outbox
	// (waiting, retried or dead-lettered) is remembered past the window
	// until the message leaves it. Zero means DefaultDedupWindow (7 days);
	// at least MinDedupWindow (1 min).
	DedupWindow time.Duration

	// SweepInterval is how often Run deletes the records older than
	// DedupWindow. Zero means DefaultSweepInterval (1 min); negative
	// disables the sweep (call Sweep yourself); positive, at least
	// MinSweepInterval (1 s).
	SweepInterval time.Duration

	// SweepBatch is the most records one delete statement removes; a
	// sweep repeats it until fewer are left. Zero means
	// DefaultSweepBatch (1000).
	SweepBatch int

	// NoHandlerWait is how long a message of a type this instance has no
	// handler for waits for an instance that has one: during a rolling
	// deploy, instances of the older version claim messages of a type
	// only the newer version handles. Until the message has waited that
	// long since it was received, the instance gives it back without
	// charging an attempt, due again after NoHandlerRetry (10 s), with a
	// warning (once per type) and backstop_inbox_no_handler_total; then it
	// is dead-lettered, reason ValidationFailure, naming the type. The
	// wait counts from the message's receipt, also for a message replayed
	// from the dead-letter queue. Zero means DefaultNoHandlerWait (1 h);
	// negative dead-letters such a message at once.
	NoHandlerWait time.Duration

	// Limits bound the messages Receive accepts; zero fields mean
	// outbox's defaults (a payload of at most 1 MiB, 64 headers). A
	// message over a limit is refused with ErrInvalid. The inbox's own
	// two headers (HeaderID, HeaderSource) do not count against them.
	// They may be raised up to outbox.MaxLimits (less the room of those
	// two headers).
	Limits outbox.Limits

	// Metrics, when not nil, is where the inbox registers its counters
	// (see metrics.go). Inboxes may share a registry: their series differ
	// by the label inbox. The relay's own metrics go to Relay.Metrics.
	Metrics prometheus.Registerer
}

// ErrInvalidConfig is matched by New's errors for a bad Config.
var ErrInvalidConfig = errors.New("inbox: invalid config")

func (c Config) withDefaults() Config {
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = DefaultSweepBatch
	}
	if c.NoHandlerWait == 0 {
		c.NoHandlerWait = DefaultNoHandlerWait
	}
	if c.Relay.Classifier == nil {
		c.Relay.Classifier = errorhandling.NewErrorClassifier(errorhandling.UnknownIsTransient())
	}
	if c.Relay.Logger == nil {
		c.Relay.Logger = slog.Default()
	}
	c.Relay.Clock = clock.OrReal(c.Relay.Clock)
	c.Limits = c.Limits.WithDefaults()
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if err := checkName(c.Name); err != nil {
		return bad("Name: %v", err)
	}
	switch {
	case len(c.Relay.Destinations) != 0:
		return bad("Relay.Destinations must be empty: the inbox sets its own")
	case c.Handling.Transport != nil:
		return bad("Handling.Transport must be nil: the inbox's handlers are the transport")
	case c.DedupWindow < MinDedupWindow:
		return bad("DedupWindow must be at least %s, got %s", MinDedupWindow, c.DedupWindow)
	case c.SweepInterval > 0 && c.SweepInterval < MinSweepInterval:
		return bad("SweepInterval must be at least %s (or negative, to disable the sweep), got %s", MinSweepInterval, c.SweepInterval)
	case c.SweepBatch < 0:
		return bad("SweepBatch must not be negative, got %d", c.SweepBatch)
	}
	if err := c.Limits.Validate(); err != nil {
		return bad("Limits: %v", err)
	}
	// The inbox's own two headers come on top of the source's (see row),
	// and the row must still be within what a store keeps.
	if most := outbox.MaxLimits.MaxHeaders - 2; c.Limits.MaxHeaders > most {
		return bad("Limits: MaxHeaders is %d, over the most an inbox takes (%d: a store keeps %d, and the inbox adds 2)",
			c.Limits.MaxHeaders, most, outbox.MaxLimits.MaxHeaders)
	}
	if most := outbox.MaxLimits.MaxHeaderBytes - ownHeaderBytes; c.Limits.MaxHeaderBytes > most {
		return bad("Limits: MaxHeaderBytes is %d, over the most an inbox takes (%d: a store keeps %d, and the inbox adds up to %d)",
			c.Limits.MaxHeaderBytes, most, outbox.MaxLimits.MaxHeaderBytes, ownHeaderBytes)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("must be 1 to %d bytes, got %d", MaxNameLen, len(name))
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("%q may hold only a-z, A-Z, 0-9, '.', '_' and '-'", name)
		}
	}
	return nil
}
