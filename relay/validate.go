package relay

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/backstophq/backstop/outbox"
)

// validate reports the first bad field of a Config that had withDefaults
// applied.
func (c Config) validate() error {
	bad := func(field string, v any, problem string) error {
		return fmt.Errorf("relay: %s %s, got %v", field, problem, v)
	}
	switch {
	case len(c.Destinations) == 0:
		return fmt.Errorf("relay: Destinations is empty; configure at least one")
	case c.UnknownDestination != DeadLetterUnknown && c.UnknownDestination != LeaveUnknown:
		return bad("UnknownDestination", int(c.UnknownDestination), "is not a known policy")
	case c.Workers < 0 || c.Workers > MaxWorkers:
		return bad("Workers", c.Workers, fmt.Sprintf("must be from 0 to %d", MaxWorkers))
	case c.BatchSize < 0:
		return bad("BatchSize", c.BatchSize, "must not be negative")
	case c.MaxBatchSize < c.BatchSize:
		return bad("MaxBatchSize", c.MaxBatchSize, fmt.Sprintf("must not be less than BatchSize (%d)", c.BatchSize))
	case c.PrefetchBytes < 0:
		return bad("PrefetchBytes", c.PrefetchBytes, "must not be negative")
	case c.PollInterval < MinPollInterval:
		return bad("PollInterval", c.PollInterval, "must be at least "+MinPollInterval.String())
	case c.MaxPollInterval < c.PollInterval:
		return bad("MaxPollInterval", c.MaxPollInterval, "must not be less than PollInterval ("+c.PollInterval.String()+")")
	case c.MaxPollInterval >= c.Store.InstanceTimeout/2:
		// An idle relay heart-beats only when it polls.
		return bad("MaxPollInterval", c.MaxPollInterval, "must be less than half the store's InstanceTimeout ("+c.Store.InstanceTimeout.String()+")")
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.Store.InstanceTimeout/2:
		return bad("HeartbeatInterval", c.HeartbeatInterval, "must be positive and less than half the store's InstanceTimeout ("+c.Store.InstanceTimeout.String()+")")
	case c.LeaseDuration <= 0:
		return bad("LeaseDuration", c.LeaseDuration, "must be positive")
	case c.ShutdownTimeout < 0:
		return bad("ShutdownTimeout", c.ShutdownTimeout, "must not be negative")
	}
	if err := c.Store.Validate(); err != nil {
		return fmt.Errorf("relay: Store: %w", err)
	}
	if !c.AllowForeignPolicies {
		foreign := make([]string, 0)
		for name := range c.Store.Policies {
			if _, ok := c.Destinations[name]; !ok {
				foreign = append(foreign, name)
			}
		}
		if len(foreign) > 0 {
			sort.Strings(foreign)
			return fmt.Errorf("relay: Store.Policies[%q] is a policy for a destination this relay does not deliver (not in Destinations; a misspelt name would silently get the default policy); deliver it, remove the policy, or set AllowForeignPolicies when other relays deliver it", foreign[0])
		}
	}
	names := make([]string, 0, len(c.Destinations))
	for name := range c.Destinations {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkDestinationName(name); err != nil {
			return err
		}
		if err := c.Destinations[name].validate(fmt.Sprintf("Destinations[%q]", name)); err != nil {
			return err
		}
	}
	return nil
}

// checkDestinationName refuses a destination name no message can carry
// (outbox.Message.ValidateLimits under outbox.MaxLimits): invalid UTF-8,
// a control character, a name over the longest a store takes. One not
// UTF-8 made New panic in the metrics' client, for which it is a label;
// the others were accepted for a destination that never got a message.
func checkDestinationName(name string) error {
	if name == "" {
		return nil // Destination.validate says so
	}
	m := outbox.Message{Destination: name, Type: "check"}
	err := m.ValidateLimits(outbox.MaxLimits)
	if err == nil {
		return nil
	}
	shown := name
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	var fe *outbox.FieldError
	if errors.As(err, &fe) {
		err = errors.New(fe.Problem)
	}
	return fmt.Errorf("relay: Destinations[%q]: the name %v: no message can be sent to it", shown, err)
}

func (d Destination) validate(field string) error {
	switch {
	case field == `Destinations[""]`:
		return fmt.Errorf("relay: Destinations has an empty name")
	case d.Transport == nil:
		return fmt.Errorf("relay: %s.Transport is nil", field)
	case d.Timeout < 0:
		return fmt.Errorf("relay: %s.Timeout must not be negative, got %s", field, d.Timeout)
	case d.FirstProbe < 0:
		return fmt.Errorf("relay: %s.FirstProbe must not be negative, got %s", field, d.FirstProbe)
	case d.MaxProbeInterval < d.FirstProbe:
		return fmt.Errorf("relay: %s.MaxProbeInterval must not be less than FirstProbe (%s), got %s", field, d.FirstProbe, d.MaxProbeInterval)
	case d.Concurrency < 0:
		return fmt.Errorf("relay: %s.Concurrency must not be negative, got %d", field, d.Concurrency)
	case d.RateLimit == nil:
	case !(d.RateLimit.PerSecond >= MinRatePerSecond) || math.IsInf(d.RateLimit.PerSecond, 0):
		// NaN fails the comparison
		return fmt.Errorf("relay: %s.RateLimit.PerSecond must be finite and at least %v (one a day), got %v", field, MinRatePerSecond, d.RateLimit.PerSecond)
	case d.RateLimit.Burst < 1:
		return fmt.Errorf("relay: %s.RateLimit.Burst must be at least 1, got %d", field, d.RateLimit.Burst)
	}
	if err := d.Breaker.Validate(); err != nil {
		return fmt.Errorf("relay: %s.Breaker: %w", field, err)
	}
	return nil
}
