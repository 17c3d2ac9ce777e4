// Package config reads the backstop binary's YAML configuration strictly:
// an unknown key, a bad duration or a bad value is refused with the key's
// path and its line, and ${NAME} in a value is replaced by the environment
// variable NAME (a variable that is not set is an error, so that a missing
// secret stops the server instead of signing with an empty key).
//
// Every setting has a default; docs/configuration.md lists them.
package config

import (
	"time"

	"github.com/backstophq/backstop/relay"
)

// Defaults of the settings a file leaves out.
const (
	DefaultListen       = "127.0.0.1:8080"
	DefaultDB           = "sqlite:./backstop.db"
	DefaultMaxBodyBytes = 2 << 20 // admin.DefaultMaxBodyBytes
	// DefaultRequestTimeout is request_timeout's default
	// (admin.DefaultRequestTimeout).
	DefaultRequestTimeout = 30 * time.Second
	DefaultWorkers        = 16
	// MinLease is the shortest store.lease_duration a configuration takes.
	MinLease              = time.Second
	DefaultPollInterval   = time.Second
	DefaultShutdown       = 30 * time.Second
	DefaultLease          = 30 * time.Second
	DefaultInstanceTO     = 60 * time.Second
	DefaultTimeout        = 30 * time.Second
	DefaultRetryBase      = 30 * time.Second
	DefaultRetryMax       = time.Hour
	DefaultRetryMult      = 2.0
	DefaultRetryJitter    = 0.25
	DefaultMaxAttempts    = 10
	DefaultInnerAttempts  = 3
	DefaultInnerDelay     = time.Second
	DefaultBreakerFails   = 5
	DefaultBreakerTimeout = 60 * time.Second
	DefaultHalfOpen       = 1
)

// Config is a backstop.yaml.
type Config struct {
	// Listen is the admin API's address. Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// DB is the store: sqlite:PATH or a postgres:// URL. Default
	// sqlite:./backstop.db.
	DB string `yaml:"db"`
	// MaxBodyBytes bounds a request body of the admin API. Default 2 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RequestTimeout bounds the store work of one admin API request (a
	// bulk action's, of each page): past it the request gets 503.
	// Default 30s.
	RequestTimeout Duration `yaml:"request_timeout"`
	// Relay tunes the relay loop.
	Relay Relay `yaml:"relay"`
	// Store tunes leases and retention.
	Store Store `yaml:"store"`
	// Destinations are where messages go. At least one.
	Destinations []Destination `yaml:"destinations"`
	// Routes fan a message naming a topic out to destinations.
	Routes []Route `yaml:"routes"`
	// Tokens are the admin API's bearer tokens.
	Tokens []Token `yaml:"tokens"`
	// Sources are receivers that write into inboxes (see sources.go).
	Sources []Source `yaml:"sources"`
}

// Relay tunes the relay loop.
type Relay struct {
	Workers int `yaml:"workers"` // default 16
	// BatchSize, MaxBatchSize and PrefetchBytes size the relay's prefetch
	// (relay.Config): 0 leaves each to the relay's default.
	BatchSize       int      `yaml:"batch_size"`
	MaxBatchSize    int      `yaml:"max_batch_size"`
	PrefetchBytes   int64    `yaml:"prefetch_bytes"`
	PollInterval    Duration `yaml:"poll_interval"`    // default 1s
	ShutdownTimeout Duration `yaml:"shutdown_timeout"` // default 30s
	// UnknownDestinations: dead_letter (default) or ignore (leave them to
	// a relay that has them).
	UnknownDestinations string `yaml:"unknown_destinations"`
}

// Store tunes leases and retention.
type Store struct {
	LeaseDuration   Duration `yaml:"lease_duration"`   // default 30s
	InstanceTimeout Duration `yaml:"instance_timeout"` // default 60s
	Retention       Duration `yaml:"retention"`        // default 0: delete on delivery
	// IdempotencyWindow is how long an idempotency key is remembered.
	// Default 168h (store.DefaultIdempotencyWindow).
	IdempotencyWindow Duration `yaml:"idempotency_window"`
	TablePrefix       string   `yaml:"table_prefix"` // default backstop_
	// Vacuum: the fleet's leader vacuums the busy tables once their dead
	// rows pass a threshold (PostgreSQL; relay.Config.NoVacuum). Default
	// true; false leaves them to autovacuum.
	Vacuum *bool `yaml:"vacuum"`
}

// Destination is everything about one destination.
type Destination struct {
	Name string `yaml:"name"`
	// Type is webhook, nats or rabbitmq.
	Type string `yaml:"type"`
	// URL is the webhook's URL, the NATS server or the AMQP broker.
	URL string `yaml:"url"`
	// Secret signs webhooks (whsec_... or raw bytes).
	Secret string `yaml:"secret"`
	// Headers are added to every webhook request.
	Headers map[string]string `yaml:"headers"`
	// Subject is the NATS subject template; Stream the JetStream stream.
	Subject string `yaml:"subject"`
	Stream  string `yaml:"stream"`
	// Exchange and RoutingKey are RabbitMQ's.
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
	// Timeout bounds one delivery attempt. Default 30s.
	Timeout Duration `yaml:"timeout"`
	// Ordering is strict (default), release or none.
	Ordering string `yaml:"ordering"`
	// Concurrency caps deliveries in progress at once. Default: workers.
	Concurrency int `yaml:"concurrency"`
	// SingledOutAfter is how long a message the destination fails while
	// delivering others goes uncharged (relay.Destination.SingledOutAfter).
	// Default 15m.
	SingledOutAfter Duration `yaml:"singled_out_after"`
	// Retry is the durable retry: after a failure charged to the message.
	Retry Retry `yaml:"retry"`
	// InnerRetry is the in-process retry of blips inside one attempt.
	InnerRetry InnerRetry `yaml:"inner_retry"`
	// Breaker guards the destination.
	Breaker Breaker `yaml:"breaker"`
	// RateLimit caps the deliveries started per second (the relay's
	// relay.RateLimit: a message waits for its token leased, without a
	// worker or its timeout); unset means none.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// UnknownErrors says what an error nobody classified is: permanent
	// (default: dead-lettered and logged) or transient.
	UnknownErrors string `yaml:"unknown_errors"`
	// StatusOverrides change what a webhook answer means.
	StatusOverrides []StatusOverride `yaml:"status_overrides"`
}

// Retry is the durable retry strategy.
type Retry struct {
	// Strategy is exponential (default), linear or fixed.
	Strategy    string   `yaml:"strategy"`
	Base        Duration `yaml:"base"`         // default 30s
	Multiplier  float64  `yaml:"multiplier"`   // default 2 (exponential)
	Max         Duration `yaml:"max"`          // default 1h
	Jitter      *float64 `yaml:"jitter"`       // default 0.25; 0 turns it off
	MaxAttempts int      `yaml:"max_attempts"` // default 10
}

// InnerRetry is the in-process retry.
type InnerRetry struct {
	Attempts int      `yaml:"attempts"` // default 3 (1 means no retry)
	Delay    Duration `yaml:"delay"`    // default 1s, doubling
}

// Breaker is the circuit breaker's settings.
type Breaker struct {
	MaxFailures         int      `yaml:"max_failures"`           // default 5
	Timeout             Duration `yaml:"timeout"`                // default 60s
	HalfOpenMaxRequests int      `yaml:"half_open_max_requests"` // default 1
}

// RateLimit is a token bucket.
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"` // default 1
}

// StatusOverride changes the meaning of webhook statuses.
type StatusOverride struct {
	Status string `yaml:"status"` // "404", "4xx" or "500-503"
	Class  string `yaml:"class"`  // transient or permanent
	Blame  string `yaml:"blame"`  // destination (default) or message
}

// TopicDestination is the destination a message is written to, by the
// library or with plain SQL, to be fanned out by the routes: its type is
// the topic. It exists when the configuration has routes.
const TopicDestination = "topic"

// Route sends the messages whose topic matches Topic to every destination
// of To. A pattern is a topic or ends in ".*" (any topic under it) or is
// "*".
type Route struct {
	Topic string   `yaml:"topic"`
	To    []string `yaml:"to"`
}

// Token is a named bearer token of the admin API.
type Token struct {
	Name  string `yaml:"name"`
	Token string `yaml:"token"`
	// Role is read (GET only) or operate (everything).
	Role string `yaml:"role"`
}

// Duration is a time.Duration written in Go syntax (500ms, 30s, 1h).
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MinTokenLen is the shortest admin token taken, from the config or
// BACKSTOP_ADMIN_TOKEN.
const MinTokenLen = 16

// MinRatePerSecond is the lowest rate_limit.per_second: one a day.
const MinRatePerSecond = relay.MinRatePerSecond

// MaxTablePrefixLen is the longest store.table_prefix: PostgreSQL cuts
// names at 63 bytes, and the longest name the migrations give an object
// after the prefix ("outbox_unordered_idx", "streams_turn", ...) is
// under 33.
const MaxTablePrefixLen = 30
