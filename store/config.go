package store

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

// Policy is how a destination's failures are retried and ordered.
type Policy struct {
	// Strategy gives the delay before retry n. nil means
	// retry.RelayBackoff() (30 s doubling, capped at 1 h, ±25 % jitter).
	Strategy retry.Strategy
	// MaxAttempts is how many failed attempts dead-letter a message. 0
	// means 10.
	MaxAttempts int
	// Ordering is the stream ordering mode. Empty means strict.
	Ordering outbox.Ordering
}

// Config is shared by the stores.
type Config struct {
	// DefaultPolicy applies to destinations without an entry in Policies.
	DefaultPolicy Policy
	// Policies maps destination names to their policy.
	Policies map[string]Policy
	// LeaseDuration is the default lease length. 0 means 30 s.
	LeaseDuration time.Duration
	// InstanceTimeout is how long an instance may go without a heartbeat
	// before it is declared dead and its leases are released. 0 means
	// 60 s.
	InstanceTimeout time.Duration
	// Retention keeps published messages this long before Sweep deletes
	// them. 0 deletes them when they are published.
	Retention time.Duration
	// IdempotencyWindow is how long an idempotency key is remembered
	// (EnqueueIdempotent, and the topics' fan-out): a request repeated
	// later writes its messages again. The fleet's leader deletes older
	// keys. 0 means DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
	// Clock, when set, replaces the database clock (tests). nil means the
	// database decides lease expiry and due times.
	Clock clock.Clock
	// TablePrefix is prepended to every table name. Empty means
	// "backstop_".
	TablePrefix string
	// Logger receives the store's operations log: rows quarantined at
	// claim (naming each row), outcomes the database refused. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Log returns c.Logger, or slog.Default() when it is nil.
func (c Config) Log() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.DefaultPolicy = c.DefaultPolicy.withDefaults()
	if c.Policies != nil {
		ps := make(map[string]Policy, len(c.Policies))
		for k, p := range c.Policies {
			ps[k] = p.withDefaults()
		}
		c.Policies = ps
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.InstanceTimeout == 0 {
		c.InstanceTimeout = 60 * time.Second
	}
	if c.TablePrefix == "" {
		c.TablePrefix = "backstop_"
	}
	if c.IdempotencyWindow == 0 {
		c.IdempotencyWindow = DefaultIdempotencyWindow
	}
	return c
}

func (p Policy) withDefaults() Policy {
	if p.Strategy == nil {
		p.Strategy = retry.RelayBackoff()
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 10
	}
	if p.Ordering == outbox.OrderingDefault {
		p.Ordering = outbox.OrderingStrict
	}
	return p
}

// Validate reports the first bad field, by name.
func (c Config) Validate() error {
	if err := c.DefaultPolicy.validate("DefaultPolicy"); err != nil {
		return err
	}
	for name, p := range c.Policies {
		if err := p.validate(fmt.Sprintf("Policies[%q]", name)); err != nil {
			return err
		}
	}
	switch {
	case c.LeaseDuration < 0:
		return fmt.Errorf("store: LeaseDuration must not be negative, got %s", c.LeaseDuration)
	case c.InstanceTimeout < 0:
		return fmt.Errorf("store: InstanceTimeout must not be negative, got %s", c.InstanceTimeout)
	case c.Retention < 0:
		return fmt.Errorf("store: Retention must not be negative, got %s", c.Retention)
	case c.IdempotencyWindow < 0:
		return fmt.Errorf("store: IdempotencyWindow must not be negative, got %s", c.IdempotencyWindow)
	}
	for _, r := range c.TablePrefix {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return fmt.Errorf("store: TablePrefix %q may hold only a-z, 0-9 and _", c.TablePrefix)
		}
	}
	// The prefix begins every table's name, written unquoted in the
	// stores' SQL: a name starting with a digit is not an identifier (the
	// migration failed with "trailing junk after numeric literal").
	if p := c.TablePrefix; p != "" && p[0] >= '0' && p[0] <= '9' {
		return fmt.Errorf("store: TablePrefix %q must not start with a digit: it begins unquoted SQL names", p)
	}
	return nil
}

func (p Policy) validate(field string) error {
	if p.MaxAttempts < 0 {
		return fmt.Errorf("store: %s.MaxAttempts must not be negative, got %d", field, p.MaxAttempts)
	}
	if err := p.Ordering.Validate(); err != nil {
		return fmt.Errorf("store: %s.Ordering: %v", field, err)
	}
	return nil
}

// PolicyFor returns the policy of a destination. c must have had
// WithDefaults applied.
func (c Config) PolicyFor(destination string) Policy {
	if p, ok := c.Policies[destination]; ok {
		return p
	}
	return c.DefaultPolicy
}

// EffectiveOrdering is the ordering of a message: its own, or its
// destination's.
func (c Config) EffectiveOrdering(m *outbox.Message) outbox.Ordering {
	if m.Ordering != outbox.OrderingDefault {
		return m.Ordering
	}
	return c.PolicyFor(m.Destination).Ordering
}

// DefaultIdempotencyWindow is how long an idempotency key is remembered by
// default: a week, as long as an inbox remembers a message id.
const DefaultIdempotencyWindow = 7 * 24 * time.Hour

// StepThreshold is how far past what a store expected its clock may read
// before the store takes it for a step forward and holds the leases
// (store/postgres migration 0036, store/sqlite 0025): the lesser of half
// the lease and a second. The expectation is never early (a slow call can
// only hide a step), so a small threshold records no false one; and since
// a hold lasts until the leases granted before the step end as they would
// have without it, a small step holds them no longer than they lasted.
func StepThreshold(lease time.Duration) time.Duration {
	return min(lease/2, time.Second)
}
