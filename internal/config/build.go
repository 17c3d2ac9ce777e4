package config

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/rabbitmq"
	"github.com/backstophq/backstop/transport/webhook"
)

// StoreConfig is the store configuration: each destination's durable retry,
// attempts and ordering in one place.
func (c *Config) StoreConfig() store.Config {
	sc := store.Config{
		Policies:          map[string]store.Policy{},
		LeaseDuration:     c.Store.LeaseDuration.D(),
		InstanceTimeout:   c.Store.InstanceTimeout.D(),
		Retention:         c.Store.Retention.D(),
		IdempotencyWindow: c.Store.IdempotencyWindow.D(),
		TablePrefix:       c.Store.TablePrefix,
	}
	for _, d := range c.Destinations {
		sc.Policies[d.Name] = store.Policy{
			Strategy:    d.Retry.strategy(),
			MaxAttempts: d.Retry.MaxAttempts,
			Ordering:    outbox.Ordering(d.Ordering),
		}
	}
	for i := range c.Sources {
		sc.Policies[inbox.Destination(c.Sources[i].Inbox)] = c.Sources[i].policy()
	}
	return sc
}

func (r Retry) strategy() retry.Strategy {
	jitter := *r.Jitter > 0
	var opts []retry.Option
	if jitter {
		opts = append(opts, retry.WithJitterFraction(*r.Jitter))
	}
	switch r.Strategy {
	case "linear":
		return retry.NewLinearBackoff(r.Base.D(), r.Max.D(), r.Base.D(), jitter, opts...)
	case "fixed":
		return retry.NewFixedDelay(r.Base.D(), jitter, opts...)
	}
	return retry.NewExponentialBackoff(r.Base.D(), r.Max.D(), jitter, append(opts, retry.WithMultiplier(r.Multiplier))...)
}

// RelayConfig builds the relay's configuration and opens every
// destination's transport. What a transport reports outside a delivery (a
// NATS connection lost and found again) goes to logger, slog.Default()
// when nil; the relay's own Logger is left for the caller to set. Close
// the returned transports when done (the relay does not).
func (c *Config) RelayConfig(ctx context.Context, logger *slog.Logger) (relay.Config, []transport.Transport, error) {
	if logger == nil {
		logger = slog.Default()
	}
	rc := relay.Config{
		Destinations:    map[string]relay.Destination{},
		Workers:         c.Relay.Workers,
		BatchSize:       c.Relay.BatchSize,
		MaxBatchSize:    c.Relay.MaxBatchSize,
		PrefetchBytes:   c.Relay.PrefetchBytes,
		PollInterval:    c.Relay.PollInterval.D(),
		ShutdownTimeout: c.Relay.ShutdownTimeout.D(),
		Classifier:      errorhandling.NewErrorClassifier(),
		NoVacuum:        c.Store.Vacuum != nil && !*c.Store.Vacuum,
	}
	switch c.Relay.UnknownDestinations {
	case "ignore":
		rc.UnknownDestination = relay.LeaveUnknown
	case "dead_letter":
		rc.UnknownDestination = relay.DeadLetterUnknown
	}
	var opened []transport.Transport
	for i, d := range c.Destinations {
		tr, err := d.transport(logger)
		if err != nil {
			for _, t := range opened {
				_ = t.Close()
			}
			return relay.Config{}, nil, &Error{Key: fmt.Sprintf("destinations[%d]", i), Problem: err.Error()}
		}
		opened = append(opened, tr)
		if err := ctx.Err(); err != nil {
			// Stopped while a transport was dialing (a NATS server that
			// takes the connection and says nothing holds New for its
			// timeout): the others are not dialed, one after another,
			// before serve can stop.
			for _, t := range opened {
				_ = t.Close()
			}
			return relay.Config{}, nil, err
		}
		if d.UnknownErrors == "transient" {
			tr = &unknownTransient{Transport: tr, classifier: rc.Classifier}
		}
		var rl *relay.RateLimit
		if d.RateLimit != nil {
			rl = &relay.RateLimit{PerSecond: d.RateLimit.PerSecond, Burst: d.RateLimit.Burst}
		}
		rc.Destinations[d.Name] = relay.Destination{
			Transport: tr,
			InProcess: retry.NewConfig(d.InnerRetry.Attempts, retry.NewExponentialBackoff(d.InnerRetry.Delay.D(), 30*time.Second, false)),
			Breaker: &circuitbreaker.Config{
				MaxFailures:         d.Breaker.MaxFailures,
				Timeout:             d.Breaker.Timeout.D(),
				HalfOpenMaxRequests: d.Breaker.HalfOpenMaxRequests,
			},
			Timeout:         d.Timeout.D(),
			Concurrency:     d.Concurrency,
			SingledOutAfter: d.SingledOutAfter.D(),
			RateLimit:       rl,
		}
	}
	return rc, opened, nil
}

// transport opens the destination's transport, reporting to logger.
func (d *Destination) transport(logger *slog.Logger) (transport.Transport, error) {
	switch d.Type {
	case "nats":
		return natstransport.New(natstransport.Config{URL: d.URL, Subject: d.Subject, Stream: d.Stream, Timeout: d.Timeout.D(), Logger: logger})
	case "rabbitmq":
		return rabbitmq.New(rabbitmq.Config{URL: d.URL, Exchange: d.Exchange, RoutingKey: d.RoutingKey, Timeout: d.Timeout.D(), Logger: logger})
	}
	return webhook.New(d.webhookConfig())
}

// webhookConfig is the webhook transport's Config of d.
func (d *Destination) webhookConfig() webhook.Config {
	wc := webhook.Config{URL: d.URL, Headers: d.Headers, Timeout: d.Timeout.D()}
	if d.Secret != "" {
		wc.Secret = []byte(d.Secret)
	}
	for _, o := range d.StatusOverrides {
		so := webhook.StatusOverride{Status: o.Status, Class: errorhandling.ClassTransient, Blame: errorhandling.BlameDestination}
		if o.Class == "permanent" {
			so.Class = errorhandling.ClassPermanent
		}
		if o.Blame == "message" {
			so.Blame = errorhandling.BlameMessage
		}
		wc.StatusOverrides = append(wc.StatusOverrides, so)
	}
	return wc
}

// unknownTransient makes the errors nobody classified transient for one
// destination (unknown_errors: transient).
type unknownTransient struct {
	transport.Transport
	classifier *errorhandling.ErrorClassifier
}

func (u *unknownTransient) Deliver(ctx context.Context, m *outbox.Message) error {
	err := u.Transport.Deliver(ctx, m)
	if err != nil && u.classifier.Classify(err).Class == errorhandling.ClassUnknown {
		return errorhandling.Transient(err)
	}
	return err
}

// Summary describes the configuration in a few lines, for config check.
func (c *Config) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen %s, db %s, %d tokens\n", c.Listen, Redact(c.DB), len(c.Tokens))
	for _, d := range c.Destinations {
		fmt.Fprintf(&b, "destination %s: %s %s, ordering %s, retry %s %s..%s max %d attempts, breaker opens after %d failures (releases wait at most %s)\n",
			d.Name, d.Type, Redact(d.URL), d.Ordering, d.Retry.Strategy, d.Retry.Base.D(), d.Retry.Max.D(),
			d.Retry.MaxAttempts, d.Breaker.MaxFailures, d.Breaker.Timeout.D())
	}
	for _, r := range c.Routes {
		fmt.Fprintf(&b, "route %s -> %s\n", r.Topic, strings.Join(r.To, ", "))
	}
	for i := range c.Sources {
		b.WriteString(c.Sources[i].summary())
	}
	return b.String()
}
