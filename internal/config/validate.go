package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/webhook"
)

// applyDefaults fills in what the file left out.
func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Listen, DefaultListen)
	def(&c.DB, DefaultDB)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = Duration(DefaultRequestTimeout)
	}
	if c.Relay.Workers == 0 {
		c.Relay.Workers = DefaultWorkers
	}
	if c.Relay.PollInterval == 0 {
		c.Relay.PollInterval = Duration(DefaultPollInterval)
	}
	if c.Relay.ShutdownTimeout == 0 {
		c.Relay.ShutdownTimeout = Duration(DefaultShutdown)
	}
	def(&c.Relay.UnknownDestinations, "dead_letter")
	if c.Store.LeaseDuration == 0 {
		c.Store.LeaseDuration = Duration(DefaultLease)
	}
	if c.Store.InstanceTimeout == 0 {
		c.Store.InstanceTimeout = Duration(DefaultInstanceTO)
	}
	def(&c.Store.TablePrefix, "backstop_")
	for i := range c.Destinations {
		d := &c.Destinations[i]
		if d.Timeout == 0 {
			d.Timeout = Duration(DefaultTimeout)
		}
		def(&d.Ordering, "strict")
		def(&d.UnknownErrors, "permanent")
		d.Retry.applyDefaults()
		if d.InnerRetry.Attempts == 0 {
			d.InnerRetry.Attempts = DefaultInnerAttempts
		}
		if d.InnerRetry.Delay == 0 {
			d.InnerRetry.Delay = Duration(DefaultInnerDelay)
		}
		if d.Breaker.MaxFailures == 0 {
			d.Breaker.MaxFailures = DefaultBreakerFails
		}
		if d.Breaker.Timeout == 0 {
			d.Breaker.Timeout = Duration(DefaultBreakerTimeout)
		}
		if d.Breaker.HalfOpenMaxRequests == 0 {
			d.Breaker.HalfOpenMaxRequests = DefaultHalfOpen
		}
		if d.RateLimit != nil && d.RateLimit.Burst == 0 {
			d.RateLimit.Burst = 1
		}
		for j := range d.StatusOverrides {
			def(&d.StatusOverrides[j].Blame, "destination")
		}
	}
	for i := range c.Tokens {
		def(&c.Tokens[i].Role, "operate")
	}
	for i := range c.Sources {
		c.Sources[i].applyDefaults()
	}
}

func (r *Retry) applyDefaults() {
	if r.Strategy == "" {
		r.Strategy = "exponential"
	}
	if r.Base == 0 {
		r.Base = Duration(DefaultRetryBase)
	}
	if r.Multiplier == 0 {
		r.Multiplier = DefaultRetryMult
	}
	if r.Max == 0 {
		r.Max = Duration(DefaultRetryMax)
	}
	if r.Jitter == nil {
		j := DefaultRetryJitter
		r.Jitter = &j
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
}

// validate returns every problem, each naming its key.
func (c *Config) validate() []*Error {
	var errs []*Error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q is not host:port", c.Listen)
	} else if _, err := net.LookupPort("tcp", port); port != "" && err != nil {
		// serve failed at its listen, naming no key
		bad("listen", "%q: port %q is not a port number (0 to 65535) or a service name", c.Listen, port)
	}
	switch {
	case c.DB == "sqlite:":
		bad("db", "sqlite: needs a path, such as sqlite:./backstop.db")
	case !strings.HasPrefix(c.DB, "sqlite:") && !strings.HasPrefix(c.DB, "postgres://") && !strings.HasPrefix(c.DB, "postgresql://"):
		bad("db", "%q is neither sqlite:PATH nor a postgres:// URL", Redact(c.DB))
	}
	if c.MaxBodyBytes < 0 {
		bad("max_body_bytes", "must not be negative")
	}
	if c.RequestTimeout < Duration(10*time.Millisecond) {
		bad("request_timeout", "must be at least 10ms")
	}
	if c.Relay.Workers < 0 {
		bad("relay.workers", "must not be negative")
	} else if c.Relay.Workers > relay.MaxWorkers {
		// the relay starts its workers at once: 2,000,000,000 of them
		// took the machine's memory
		bad("relay.workers", "must be at most %d (run more relays for more deliveries at once)", relay.MaxWorkers)
	}
	if c.Store.LeaseDuration.D() < MinLease {
		// a lease of 1ns lapsed before its message could be sent: every
		// claim was taken again by the next
		bad("store.lease_duration", "must be at least %v (the relay renews a lease every third of it while it delivers)", MinLease)
	}
	if c.Relay.BatchSize < 0 {
		bad("relay.batch_size", "must not be negative")
	}
	if c.Relay.MaxBatchSize < 0 {
		bad("relay.max_batch_size", "must not be negative")
	} else if c.Relay.MaxBatchSize > 0 && c.Relay.MaxBatchSize < c.Relay.BatchSize {
		bad("relay.max_batch_size", "must not be less than relay.batch_size (%d)", c.Relay.BatchSize)
	}
	if c.Relay.PrefetchBytes < 0 {
		bad("relay.prefetch_bytes", "must not be negative")
	}
	if c.Relay.PollInterval.D() < 10e6 {
		bad("relay.poll_interval", "must be at least 10ms")
	}
	// An idle relay heart-beats only when it polls, at most its longest
	// poll wait apart (relay.poll_interval or 5s, the longer): the relay
	// refused to start otherwise, while config check said ok.
	if longest := max(relay.DefaultMaxPollInterval, c.Relay.PollInterval.D()); longest >= c.Store.InstanceTimeout.D()/2 { // as the relay checks it: 2*longest overflowed for a poll_interval over 146 years, and passed
		bad("store.instance_timeout", "must be more than twice the relay's longest poll wait (%v: relay.poll_interval or %v, the longer), since an idle relay heart-beats only when it polls",
			longest, relay.DefaultMaxPollInterval)
	}
	oneOf(&errs, "relay.unknown_destinations", c.Relay.UnknownDestinations, "dead_letter", "ignore")
	if len(c.Store.TablePrefix) > MaxTablePrefixLen {
		bad("store.table_prefix", "is %d bytes, more than %d (PostgreSQL cuts names at 63 bytes, and the longest name Backstop gives a table adds %d)",
			len(c.Store.TablePrefix), MaxTablePrefixLen, 63-MaxTablePrefixLen)
	}
	for _, r := range c.Store.TablePrefix {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			bad("store.table_prefix", "may hold only a-z, 0-9 and _")
			break
		}
	}
	if len(c.Destinations) == 0 {
		bad("destinations", "at least one destination is required")
	}
	names := map[string]bool{}
	for i := range c.Destinations {
		d := &c.Destinations[i]
		p := fmt.Sprintf("destinations[%d]", i)
		errs = append(errs, d.validate(p)...)
		if names[d.Name] {
			bad(p+".name", "%q is named twice", d.Name)
		}
		names[d.Name] = true
	}
	if len(c.Routes) > 0 && names[TopicDestination] {
		bad("routes", "destination name %q is reserved for the routes' fan-out: rename the destination", TopicDestination)
	}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		if err := checkPattern(r.Topic); err != "" {
			bad(p+".topic", "%s", err)
		}
		if len(r.To) == 0 {
			bad(p+".to", "names no destination")
		}
		for j, to := range r.To {
			if !names[to] {
				bad(fmt.Sprintf("%s.to[%d]", p, j), "unknown destination %q", to)
			}
		}
	}
	errs = append(errs, c.validateSources(names)...)
	tokens, tokenNames := map[string]bool{}, map[string]bool{}
	for i, t := range c.Tokens {
		p := fmt.Sprintf("tokens[%d]", i)
		switch {
		case t.Name == "":
			bad(p+".name", "is required")
		case tokenNames[t.Name]:
			// the audit log names the actor by its token's name
			bad(p+".name", "%q is the name of another token: the audit log could not tell them apart", t.Name)
		case len(t.Token) < MinTokenLen:
			bad(p+".token", "must be at least %d characters", MinTokenLen)
		case admin.TokenProblem(t.Token) != "":
			bad(p+".token", "%s", admin.TokenProblem(t.Token))
		case tokens[t.Token]:
			bad(p+".token", "is the same as another token's")
		}
		tokens[t.Token], tokenNames[t.Name] = true, true
		oneOf(&errs, p+".role", t.Role, "read", "operate")
	}
	return errs
}

func (d *Destination) validate(p string) []*Error {
	var errs []*Error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: p + "." + key, Problem: fmt.Sprintf(format, args...)})
	}
	if d.Name == "" {
		bad("name", "is required")
	} else if err := (&outbox.Message{Destination: d.Name, Type: "t"}).Validate(); err != nil {
		bad("name", "%q is not a valid destination name", d.Name)
	}
	oneOf(&errs, p+".type", d.Type, "webhook", "nats", "rabbitmq")
	if d.URL == "" {
		bad("url", "is required")
	} else if u, err := url.Parse(d.URL); err != nil || u.Scheme == "" || u.Host == "" {
		bad("url", "%q is not an absolute URL", Redact(d.URL))
	} else {
		want := map[string][]string{"webhook": {"http", "https"}, "nats": {"nats", "tls", "ws", "wss"}, "rabbitmq": {"amqp", "amqps"}}[d.Type]
		if want != nil && !contains(want, u.Scheme) {
			bad("url", "scheme %q does not suit a %s destination (want %s)", u.Scheme, d.Type, strings.Join(want, " or "))
		} else if problem := brokerPorts(d.Type, d.URL); problem != "" {
			bad("url", "%s", problem)
		}
	}
	if d.Type != "webhook" {
		if d.Secret != "" {
			bad("secret", "only webhooks are signed")
		}
		if len(d.StatusOverrides) > 0 {
			bad("status_overrides", "only webhooks answer with a status")
		}
	}
	// Another type's setting would be dropped without a word: refused,
	// as a misspelt key is.
	for _, k := range []struct {
		key, typ string
		set      bool
	}{
		{"headers", "webhook", len(d.Headers) > 0},
		{"subject", "nats", d.Subject != ""},
		{"stream", "nats", d.Stream != ""},
		{"exchange", "rabbitmq", d.Exchange != ""},
		{"routing_key", "rabbitmq", d.RoutingKey != ""},
	} {
		if k.set && d.Type != k.typ && contains([]string{"webhook", "nats", "rabbitmq"}, d.Type) {
			bad(k.key, "is not a setting of a %s destination (only of %s destinations)", d.Type, k.typ)
		}
	}
	if d.Type == "nats" {
		// What the NATS transport refuses, or could never publish to (a
		// wildcard or a space in the subject dead-lettered every
		// message), is refused here with its key and line.
		if err := natstransport.CheckSubjectTemplate(d.Subject); err != nil {
			bad("subject", "%v", err)
		}
		if err := natstransport.CheckStreamName(d.Stream); err != nil {
			bad("stream", "%v", err)
		}
	}
	oneOf(&errs, p+".ordering", d.Ordering, "strict", "release", "none")
	oneOf(&errs, p+".unknown_errors", d.UnknownErrors, "permanent", "transient")
	if d.Concurrency < 0 {
		bad("concurrency", "must not be negative")
	}
	if d.SingledOutAfter < 0 {
		bad("singled_out_after", "must not be negative")
	}
	r := d.Retry
	oneOf(&errs, p+".retry.strategy", r.Strategy, "exponential", "linear", "fixed")
	if !(r.Multiplier >= 1) || math.IsInf(r.Multiplier, 0) { // NaN fails every comparison
		bad("retry.multiplier", "must be a number of at least 1, got %v", r.Multiplier)
	}
	if r.Max < r.Base {
		bad("retry.max", "%s is less than retry.base %s", r.Max.D(), r.Base.D())
	}
	if !(*r.Jitter >= 0 && *r.Jitter <= 1) {
		bad("retry.jitter", "must be between 0 and 1, got %v", *r.Jitter)
	}
	if r.MaxAttempts < 1 {
		bad("retry.max_attempts", "must be at least 1, got %d", r.MaxAttempts)
	}
	if d.InnerRetry.Attempts < 1 {
		bad("inner_retry.attempts", "must be at least 1, got %d", d.InnerRetry.Attempts)
	}
	if d.Breaker.MaxFailures < 1 {
		bad("breaker.max_failures", "must be at least 1, got %d", d.Breaker.MaxFailures)
	}
	if d.Breaker.HalfOpenMaxRequests < 1 {
		bad("breaker.half_open_max_requests", "must be at least 1, got %d", d.Breaker.HalfOpenMaxRequests)
	}
	if rl := d.RateLimit; rl != nil {
		// At least one a day, and finite: 1e-10 a second overflowed the
		// interval between sends into a negative one (no limit at all).
		if !(rl.PerSecond >= MinRatePerSecond) || math.IsInf(rl.PerSecond, 0) {
			bad("rate_limit.per_second", "must be a number of at least %v (one a day), got %v", MinRatePerSecond, rl.PerSecond)
		}
		if rl.Burst < 1 {
			bad("rate_limit.burst", "must be at least 1, got %d", rl.Burst)
		}
	}
	for i, o := range d.StatusOverrides {
		oneOf(&errs, fmt.Sprintf("%s.status_overrides[%d].class", p, i), o.Class, "transient", "permanent")
		oneOf(&errs, fmt.Sprintf("%s.status_overrides[%d].blame", p, i), o.Blame, "destination", "message")
	}
	if d.Type == "webhook" && len(errs) == 0 {
		// What the webhook transport refuses (a header name that is
		// not a token, a secret that is not base64, a status override
		// it cannot read) is refused here, with its key and line: the
		// config check passed files that serve then refused.
		if tr, err := webhook.New(d.webhookConfig()); err != nil {
			key, problem := webhookKey(err)
			bad(key, "%s", problem)
		} else {
			_ = tr.Close()
		}
	}
	return errs
}

// webhookKey maps the webhook transport's refusal of its Config to the
// destination's key and the problem.
func webhookKey(err error) (key, problem string) {
	text := strings.TrimPrefix(err.Error(), webhook.ErrInvalidConfig.Error()+": ")
	for _, m := range []struct{ field, key string }{
		{"Config.StatusOverrides", "status_overrides"}, {"Config.Headers", "headers"},
		{"Config.Secret", "secret"}, {"Config.URL", "url"}, {"Config.Timeout", "timeout"},
	} {
		if rest, ok := strings.CutPrefix(text, m.field); ok {
			key = m.key
			if strings.HasPrefix(rest, "[") {
				if i := strings.IndexByte(rest, ']'); i > 0 {
					key += rest[:i+1]
					rest = rest[i+1:]
				}
			}
			if i := strings.IndexByte(rest, '.'); i == 0 {
				// Config.StatusOverrides[1].Status: the field after it
				if j := strings.IndexAny(rest[1:], " :"); j > 0 {
					key += "." + strings.ToLower(rest[1:1+j])
					rest = rest[1+j:]
				}
			}
			return key, strings.TrimLeft(rest, ": ")
		}
	}
	return "type", text
}

// brokerPorts says what is wrong with the ports of a NATS server's or an
// AMQP broker's URL (a comma-separated list for NATS), or "". A port out
// of range (nats://host:99999) failed every dial as if the server could
// not be reached: serve started, its deliveries and the source waiting
// for ever on a server that was never to be reached.
func brokerPorts(typ, raw string) string {
	if typ != "nats" && typ != "rabbitmq" {
		return ""
	}
	parts := []string{raw}
	if typ == "nats" {
		parts = strings.Split(raw, ",")
	}
	for _, part := range parts {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			continue // reported as a URL that does not parse, if it is one
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Sprintf("has port %q, not 1 to 65535", p)
			}
		}
	}
	return ""
}

func oneOf(errs *[]*Error, key, v string, allowed ...string) {
	if !contains(allowed, v) {
		*errs = append(*errs, &Error{Key: key, Problem: fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", "))})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkPattern returns what is wrong with a route's topic pattern, or "".
func checkPattern(p string) string {
	switch {
	case p == "":
		return "is required"
	case p == "*":
		return ""
	case strings.Contains(strings.TrimSuffix(p, ".*"), "*"):
		return fmt.Sprintf("%q: * may only stand alone or end the pattern as .*", p)
	}
	return ""
}

// Match reports whether topic matches the route's pattern.
func (r Route) Match(topic string) bool {
	switch {
	case r.Topic == "*":
		return true
	case strings.HasSuffix(r.Topic, ".*"):
		return strings.HasPrefix(topic, strings.TrimSuffix(r.Topic, "*"))
	}
	return r.Topic == topic
}

// Destinations returns the destinations a topic is routed to, each once, in
// the order of the routes.
func (c *Config) RouteTopic(topic string) []string {
	var out []string
	for _, r := range c.Routes {
		if !r.Match(topic) {
			continue
		}
		for _, d := range r.To {
			if !contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}
