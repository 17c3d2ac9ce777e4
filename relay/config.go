package relay

import (
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport"
)

// MaxWorkers is the most Workers a relay takes: it starts them at once,
// and more deliveries at a time are better had from more relays.
const MaxWorkers = 10_000

// Defaults applied by New to zero Config and Destination fields.
const (
	DefaultWorkers         = 16
	DefaultPollInterval    = time.Second
	DefaultMaxPollInterval = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultTimeout         = 30 * time.Second
	// DefaultBatchFactor times Workers is the default BatchSize: the
	// prefetch that keeps the workers busy while claims and records are
	// under way.
	DefaultBatchFactor = 16
	// DefaultMaxBatchSize is the default MaxBatchSize when BatchSize is
	// not set: how far the prefetch may grow while deliveries are fast.
	DefaultMaxBatchSize = 4096
	// DefaultPrefetchBytes is the default PrefetchBytes: 64 MiB.
	DefaultPrefetchBytes = 64 << 20
	// MinPollInterval is the shortest PollInterval New accepts, so that a
	// typo cannot turn the relay into a busy loop against the database.
	MinPollInterval = 10 * time.Millisecond
)

// Config configures a Relay. Every zero field means the default its comment
// gives; New applies the defaults and then validates, returning an error
// that names the first bad field.
type Config struct {
	// Instance identifies this relay process to the store, which records
	// its heartbeats and leases under Instance.ID. A zero ID means a random
	// UUID; a zero Host the host name; a zero PID the process id; a zero
	// StartedAt the time New was called.
	Instance store.Instance

	// Destinations maps destination names, as messages carry them in
	// outbox.Message.Destination, to how they are delivered. At least one
	// is required, and each name must be one a message can carry (valid
	// UTF-8 without control characters, at most
	// outbox.MaxLimits.MaxDestinationLen bytes).
	Destinations map[string]Destination

	// UnknownDestination says what happens to a message whose destination
	// is not in Destinations. The zero value is LeaveUnknown: such
	// messages wait for a relay that knows their destination.
	UnknownDestination UnknownDestinationPolicy

	// OnDelivered, OnFailure and OnDeadLetter, when set, are called once
	// the store has recorded a delivery, a failed attempt charged to a
	// message that will be tried again, and a message moved to the
	// dead-letter queue. They run on the relay's recorder goroutine and
	// should be quick; a panic in one is logged and ignored.
	OnDelivered  func(m *outbox.Message)
	OnFailure    func(f Failure)
	OnDeadLetter func(f Failure)

	// DeadLetters, when set, is told of every message the relay
	// dead-letters (dlq.Manager.Notify): its OnEntryAdded and
	// OnThresholdReached callbacks fire for them, as for the entries it
	// adds itself. Give it the store's dead-letter queue (store.DLQ()) so
	// that its threshold counts the same entries.
	DeadLetters *dlq.Manager

	// Workers is the most deliveries made at once (goroutines delivering).
	// Zero means DefaultWorkers (16); at most MaxWorkers.
	Workers int

	// BatchSize is how many messages the relay holds leased at once (its
	// prefetch), and so the most one claim asks for: up to Workers are
	// being delivered and the rest wait for a worker, so that workers are
	// never idle while the relay talks to the store. The relay claims
	// again once an eighth of it is free (or the workers run short), in
	// store calls of their own; outcomes are recorded in other calls,
	// batched. Zero means DefaultBatchFactor × Workers.
	//
	// While deliveries are fast the relay holds more, up to MaxBatchSize:
	// as many as it delivers in a quarter of a second, measured as it
	// goes, so that each store call moves more messages. Slow deliveries
	// keep it at BatchSize, so one relay of a fleet never leases work that
	// others could be doing.
	BatchSize int

	// MaxBatchSize caps the prefetch's growth (see BatchSize). Zero means
	// DefaultMaxBatchSize (4,096) when BatchSize is zero too, and
	// BatchSize when it is set: a BatchSize set alone is held fixed.
	// Values below BatchSize are rejected.
	MaxBatchSize int

	// PrefetchBytes caps the bytes of the messages the relay holds leased
	// and not yet delivered (payloads and headers, with an allowance for
	// the memory each message and header takes besides): each claim asks
	// the store to stop at the bytes it leaves (store.ClaimRequest.MaxBytes),
	// its first message of any size (FirstAnySize), and the relay claims
	// nothing once they reach it: it holds at most PrefetchBytes and one
	// message more. A message larger than PrefetchBytes by itself is not
	// counted while it is held, so the relay goes on claiming the others
	// within the budget (and no second such message until it is done).
	// What a claim brings back past the budget (the relay counts headers
	// more heavily than the store does, and a store may not bound its
	// claims) is given back, undelivered and uncharged, in its next store
	// call. Zero means DefaultPrefetchBytes (64 MiB).
	PrefetchBytes int64

	// PollInterval is how soon an idle relay asks the store for work
	// again after a claim that found some. Each claim that finds nothing
	// doubles the wait, up to MaxPollInterval; finding work, a store
	// notification (store.Notifier) or a finished delivery brings the
	// relay back at once. Zero means DefaultPollInterval (1 s); values
	// below MinPollInterval are rejected.
	PollInterval time.Duration

	// MaxPollInterval caps the idle back-off of PollInterval. It should
	// stay well below the store's InstanceTimeout, since an idle relay
	// heart-beats only when it polls. Zero means the larger of
	// DefaultMaxPollInterval (5 s) and PollInterval.
	MaxPollInterval time.Duration

	// LeaseDuration is how long a claim holds a message. The relay renews
	// the leases of the messages it holds every LeaseDuration/3, so long
	// deliveries keep theirs. Zero means the store's LeaseDuration (30 s by
	// default).
	LeaseDuration time.Duration

	// ShutdownTimeout is how long Run, once its context is done, waits for
	// deliveries in progress before cancelling their contexts. Zero means
	// DefaultShutdownTimeout (30 s).
	ShutdownTimeout time.Duration

	// Classifier decides what a delivery error means: whether it is
	// retried, and whether the message or the destination is blamed. Its
	// UnknownTransient setting decides errors nobody classified: permanent
	// (dead-lettered at once, the default) or transient. Nil means
	// errorhandling.NewErrorClassifier().
	Classifier *errorhandling.ErrorClassifier

	// Tracker is the template of the per-destination trackers that pace
	// retries after faults blamed on a destination (a message given back
	// waits the tracker's back-off, at most the breaker's Timeout and at
	// least the error's retry-after hint) and report a destination
	// failing for long to the operations log. A nil Strategy means 1 s
	// doubling up to 5 min; a nil Logger or Clock the relay's.
	Tracker tracker.RegistryConfig

	// Store is the store's configuration, read for each destination's
	// ordering mode and retry limit and for the default lease. Nil means
	// the store's own (store.Store.Config), which is almost always right:
	// set it only to make the relay see a different view on purpose.
	Store *store.Config

	// AllowForeignPolicies lets the store's Policies name destinations
	// this relay does not deliver, for a store shared with other relays
	// (an inbox beside an outbox relay, a destination served by another
	// deployment). Without it such a policy is an error from New: a
	// destination's settings belong in one place, and a policy under a
	// misspelt name would otherwise leave the real destination on the
	// default policy without a word.
	AllowForeignPolicies bool

	// Logger receives the relay's records: operational events (permanent
	// failures, dead letters, breaker trips, lost leases) at WARN and
	// ERROR, routine retries and releases at DEBUG and INFO. Payloads and
	// headers are never logged. Nil means slog.Default().
	Logger *slog.Logger

	// Metrics, when not nil, is where the relay registers its Prometheus
	// metrics (see metrics.go; namespace "backstop"). Two relays in one
	// process need two registries, or one wrapped with
	// prometheus.WrapRegistererWith. Nil means no metrics are registered.
	Metrics prometheus.Registerer

	// HeartbeatInterval is how often the relay heart-beats, in a store
	// call of its own, when the store implements store.Fleet; the fleet's
	// leader also reaps dead instances and sweeps delivered messages at
	// this cadence. Zero means a quarter of the store's InstanceTimeout.
	HeartbeatInterval time.Duration

	// NoFleet makes the relay act alone even when the store implements
	// store.Fleet: its circuits are its own, every ProcessBatch
	// heart-beats and reaps as with other stores, and every 10 s it
	// sweeps the turn rows of emptied streams (store.StreamTurnSweeper),
	// the idempotency keys past their window and the delivered messages
	// kept past the store's Retention (with store.Fleet's sweeps), and
	// moves the retries scheduled before a step back of the clock
	// (store.ScheduleRebaser), and it vacuums (store.Vacuumer) itself.
	NoFleet bool

	// NoSweep turns off the sweeps of delivered messages kept for the
	// store's Retention (on whenever Retention is set) and of idempotency
	// keys past their window, by the fleet's leader or by a relay without
	// a fleet, for deployments that run store.Store.Sweep themselves.
	NoSweep bool

	// NoVacuum turns off the leader's vacuum of the store's busy tables
	// (store.Vacuumer: PostgreSQL's outbox, streams, wake-ups, turn rows,
	// inbox records and idempotency keys, a workflow store's tables, each
	// once its dead rows pass a threshold, checked every 5 s), for a
	// database whose autovacuum is tuned to keep up with them.
	NoVacuum bool

	// Clock is the time source of every timer the relay sets. Nil means
	// clock.Real. Tests pass a clock.Fake, and the same one to the store.
	Clock clock.Clock
}

// Destination is how messages for one destination are delivered.
type Destination struct {
	// Transport delivers the messages. Required.
	Transport transport.Transport

	// InProcess is the short retry inside one delivery attempt, for
	// blips. Only errors the relay's Classifier calls retryable are tried
	// again; its own Classifier field is not used. Nil means seed 001's 3
	// tries, 1 s and 2 s apart: retry.NewConfig(3,
	// retry.InProcessBackoff()). A nil Clock means the relay's.
	InProcess *retry.Config

	// Breaker guards the destination. Nil means
	// circuitbreaker.DefaultConfig() (5 failures in a row open it for
	// 60 s). A nil Classifier means the relay's, so faults blamed on the
	// message do not count (errors nobody classified do, as
	// circuitbreaker.DefaultIsFailure says); a nil Logger or Clock the
	// relay's; an empty Name the destination's name.
	Breaker *circuitbreaker.Config

	// Timeout bounds one delivery attempt: every in-process try and the
	// waits between them. Zero means DefaultTimeout (30 s).
	Timeout time.Duration

	// FirstProbe is how long after the destination's circuit opens the
	// relay sends the first probe; each probe that fails doubles the wait
	// before the next, up to MaxProbeInterval. Zero means
	// DefaultFirstProbe (1 s).
	FirstProbe time.Duration

	// MaxProbeInterval caps the wait between probes of a destination that
	// stays down, and so bounds how long after it comes back delivery
	// resumes. The relay, not the breaker's Timeout, decides when to
	// probe. Zero means DefaultMaxProbeInterval (5 s).
	MaxProbeInterval time.Duration

	// SingledOutAfter is how long a message must go on failing here with
	// faults blamed on the destination (5xx, timeouts, refusals), at
	// least 5 of them met while the destination was delivering other
	// messages, before those faults are charged to it as attempts: the
	// destination is up, and fails this message (a receiver that crashes
	// on its payload). Until then each such fault is released uncharged,
	// as an outage's are, and the message backs off on its own (1 s
	// doubling to 5 min) besides the destination's back-off; after it,
	// the message goes through its retry policy to the dead-letter queue,
	// its error starting "singled out". A destination failing every
	// message never singles one out, nor does a fault that says the
	// destination lacked room (transport.ErrNoRoom: a full queue that
	// takes a message now and then). Zero means DefaultSingledOutAfter
	// (15 min); negative never charges a fault blamed on the destination.
	SingledOutAfter time.Duration

	// Concurrency is the most deliveries to this destination in progress
	// at once. Zero means Workers. With more than one destination, a
	// quarter of the workers (at least one) are kept for the destinations
	// under their fair share of the pool, so that one whose deliveries
	// hang or crawl never holds every worker: it holds at most Workers less
	// that reserve, and its share once others have work.
	Concurrency int

	// RateLimit, when set, caps the deliveries started to this
	// destination (see RateLimit): a message waits for its token without
	// a worker, its timeout, an attempt or the breaker. Nil means no
	// limit.
	RateLimit *RateLimit
}

// UnknownDestinationPolicy says what the relay does with a message for a
// destination it has no Transport for.
type UnknownDestinationPolicy int

const (
	// LeaveUnknown claims only messages for the configured destinations
	// and leaves the rest for a relay that has them: several relays
	// sharing one store and splitting the destinations between them, or
	// a rolling deploy in which a new destination reaches the relays one
	// by one. The relay logs a warning once per such destination and
	// exports the number of messages waiting for one
	// (unknown_destination_messages). The default.
	LeaveUnknown UnknownDestinationPolicy = iota
	// DeadLetterUnknown claims messages for every destination and
	// dead-letters those for an unconfigured one at once, with reason
	// ValidationFailure and the error "destination "x" is not
	// configured": nothing waits unseen.
	DeadLetterUnknown
	// IgnoreUnknown is LeaveUnknown's former name.
	IgnoreUnknown = LeaveUnknown
)

// withDefaults returns a copy of c with its zero fields set. Destinations
// are copied; their pointer fields are copied before being filled in, so
// the caller's values are never changed.
func (c Config) withDefaults(s store.Store) Config {
	if c.Instance.ID == "" {
		c.Instance.ID = uuid.NewString()
	}
	if c.Instance.Host == "" {
		c.Instance.Host, _ = os.Hostname()
	}
	if c.Instance.PID == 0 {
		c.Instance.PID = os.Getpid()
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Instance.StartedAt.IsZero() {
		c.Instance.StartedAt = c.Clock.Now()
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxBatchSize == 0 {
		if c.BatchSize == 0 {
			c.MaxBatchSize = max(DefaultMaxBatchSize, DefaultBatchFactor*c.Workers)
		} else {
			c.MaxBatchSize = c.BatchSize
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = min(DefaultBatchFactor*c.Workers, c.MaxBatchSize)
	}
	if c.PrefetchBytes == 0 {
		c.PrefetchBytes = DefaultPrefetchBytes
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = max(DefaultMaxPollInterval, c.PollInterval)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Classifier == nil {
		c.Classifier = errorhandling.NewErrorClassifier()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Store = storeConfig(c.Store, s)
	if c.LeaseDuration == 0 {
		c.LeaseDuration = c.Store.LeaseDuration
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Store.InstanceTimeout / 4
	}
	if c.Tracker.Logger == nil {
		c.Tracker.Logger = c.Logger
	}
	if c.Tracker.Clock == nil {
		c.Tracker.Clock = c.Clock
	}
	if c.Tracker.Name == "" {
		c.Tracker.Name = "destination"
	}
	dests := make(map[string]Destination, len(c.Destinations))
	for name, d := range c.Destinations {
		dests[name] = d.withDefaults(name, &c)
	}
	c.Destinations = dests
	return c
}

// storeConfig returns the store configuration to use, defaults applied.
func storeConfig(given *store.Config, s store.Store) *store.Config {
	var sc store.Config
	switch {
	case given != nil:
		sc = *given
	case s != nil:
		sc = s.Config()
	}
	sc = sc.WithDefaults()
	return &sc
}

func (d Destination) withDefaults(name string, c *Config) Destination {
	var in retry.Config
	if d.InProcess != nil {
		in = *d.InProcess
	} else {
		in = *retry.NewConfig(3, retry.InProcessBackoff())
	}
	if in.Clock == nil {
		in.Clock = c.Clock
	}
	d.InProcess = &in

	var br circuitbreaker.Config
	if d.Breaker != nil {
		br = *d.Breaker
	} else {
		br = *circuitbreaker.DefaultConfig()
	}
	if br.Classifier == nil {
		br.Classifier = c.Classifier
	}
	if br.Logger == nil {
		br.Logger = c.Logger
	}
	if br.Clock == nil {
		br.Clock = c.Clock
	}
	if br.Name == "" {
		br.Name = name
	}
	if br.HalfOpenMaxRequests == 0 {
		br.HalfOpenMaxRequests = circuitbreaker.DefaultHalfOpenMaxRequests
	}
	d.Breaker = &br

	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.FirstProbe == 0 {
		d.FirstProbe = DefaultFirstProbe
	}
	if d.MaxProbeInterval == 0 {
		d.MaxProbeInterval = max(DefaultMaxProbeInterval, d.FirstProbe)
	}
	if d.Concurrency == 0 {
		d.Concurrency = c.Workers
	}
	if d.SingledOutAfter == 0 {
		d.SingledOutAfter = DefaultSingledOutAfter
	}
	if d.RateLimit != nil {
		rl := *d.RateLimit
		if rl.Burst == 0 {
			rl.Burst = 1
		}
		d.RateLimit = &rl
	}
	return d
}

// clone returns a copy of c that shares no mutable state with it.
func (c Config) clone() Config {
	sc := *c.Store
	sc.Policies = maps.Clone(sc.Policies)
	c.Store = &sc
	dests := make(map[string]Destination, len(c.Destinations))
	for name, d := range c.Destinations {
		in, br := *d.InProcess, *d.Breaker
		d.InProcess, d.Breaker = &in, &br
		if d.RateLimit != nil {
			rl := *d.RateLimit
			d.RateLimit = &rl
		}
		dests[name] = d
	}
	c.Destinations = dests
	return c
}
