package config

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

const hostileBase = "destinations:\n  - name: hook\n    type: webhook\n    url: http://x/y\n"

// What an operator's file can say that was taken silently with another
// meaning: each is refused now, naming its key.
func TestValuesThatMeantSomethingElseAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		key        string
	}{
		// An empty variable turned the webhook's secret off: unsigned.
		{"empty secret variable", hostileBase + "    secret: ${HOOK_SECRET}\n", map[string]string{"HOOK_SECRET": ""}, "destinations[0].secret"},
		// yaml.v3 cut 8.9 to 8; 0.5 became 0, then the default.
		{"fraction for workers", "relay: {workers: 8.9}\n" + hostileBase, nil, "relay.workers"},
		{"fraction for max_attempts", hostileBase + "    retry: {max_attempts: 2.5}\n", nil, "destinations[0].retry.max_attempts"},
		{"fraction for max_failures", hostileBase + "    breaker: {max_failures: 0.5}\n", nil, "destinations[0].breaker.max_failures"},
		// An alias skipped the unknown-key check.
		{"alias of another section", hostileBase + "    retry: &r {base: 1s, max: 2s}\n    breaker: *r\n", nil, "destinations[0].breaker.base"},
		// A 0 became the default.
		{"zero timeout", hostileBase + "    timeout: 0s\n", nil, "destinations[0].timeout"},
		{"zero max_attempts", hostileBase + "    retry: {max_attempts: 0}\n", nil, "destinations[0].retry.max_attempts"},
		{"zero breaker timeout", hostileBase + "    breaker: {timeout: 0ms}\n", nil, "destinations[0].breaker.timeout"},
		{"zero workers", "relay: {workers: 0}\n" + hostileBase, nil, "relay.workers"},
		// NaN passed every range check; 1e-10 a second overflowed the
		// interval between sends into a negative one: no limit.
		{"NaN multiplier", hostileBase + "    retry: {multiplier: .nan}\n", nil, "destinations[0].retry.multiplier"},
		{"NaN jitter", hostileBase + "    retry: {jitter: .nan}\n", nil, "destinations[0].retry.jitter"},
		{"NaN rate", hostileBase + "    rate_limit: {per_second: .nan}\n", nil, "destinations[0].rate_limit.per_second"},
		{"tiny rate", hostileBase + "    rate_limit: {per_second: 1e-10}\n", nil, "destinations[0].rate_limit.per_second"},
		{"infinite multiplier", hostileBase + "    retry: {multiplier: .inf}\n", nil, "destinations[0].retry.multiplier"},
		// PostgreSQL cuts names at 63 bytes: migrate failed with
		// "relation already exists".
		{"long table prefix", "store: {table_prefix: " + strings.Repeat("a", 58) + "_}\n" + hostileBase, nil, "store.table_prefix"},
		// config check said ok, and serve then refused to start, naming
		// MaxPollInterval, which no key sets.
		{"instance timeout within two poll waits", "store: {instance_timeout: 10s}\n" + hostileBase, nil, "store.instance_timeout"},
		{"poll interval over half the instance timeout", "relay: {poll_interval: 30s}\n" + hostileBase, nil, "store.instance_timeout"},
		// The relay started two billion workers at once.
		{"too many workers", "relay: {workers: 2000000000}\n" + hostileBase, nil, "relay.workers"},
		// Every lease lapsed before its message could be sent.
		{"lease of a nanosecond", "store: {lease_duration: 1ns}\n" + hostileBase, nil, "store.lease_duration"},
		// An admin request past it gets 503: none could be served.
		{"zero request timeout", "request_timeout: 0s\n" + hostileBase, nil, "request_timeout"},
		{"request timeout of a nanosecond", "request_timeout: 1ns\n" + hostileBase, nil, "request_timeout"},
		// The audit log names the actor by its token's name.
		{"two tokens of one name", "tokens:\n  - {name: ops, token: " + strings.Repeat("a", 32) + ", role: operate}\n" +
			"  - {name: ops, token: " + strings.Repeat("b", 32) + ", role: read}\n" + hostileBase, nil, "tokens[1].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("Parse = %v, want an error naming %s", err, tc.key)
			}
		})
	}
}

// ${NAME} in any value, numbers included: a plain value is read as what
// the variable says.
func TestVariablesInNumbers(t *testing.T) {
	c, err := Parse([]byte("relay:\n  workers: ${WORKERS}\n"+hostileBase+"    retry:\n      max_attempts: ${N}\n    rate_limit:\n      per_second: ${RATE}\n    secret: ${SECRET}\n"),
		env(map[string]string{"WORKERS": "8", "N": "5", "RATE": "2.5", "SECRET": "12345678"}))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Destinations[0]
	if c.Relay.Workers != 8 || d.Retry.MaxAttempts != 5 || d.RateLimit.PerSecond != 2.5 || d.Secret != "12345678" {
		t.Fatalf("workers %d, max_attempts %d, per_second %v, secret %q", c.Relay.Workers, d.Retry.MaxAttempts, d.RateLimit.PerSecond, d.Secret)
	}
	// Quoted, a value stays a string.
	if _, err := Parse([]byte("relay:\n  workers: \"${WORKERS}\"\n"+hostileBase), env(map[string]string{"WORKERS": "8"})); err == nil {
		t.Fatal(`workers: "${WORKERS}" (a quoted string) was taken as a number`)
	}
}

// What the webhook transport refuses is refused when the file is read,
// with its key and line: `backstop config check` said ok to these, and
// serve then refused to start without a line.
func TestWebhookSettingsAreCheckedWithTheFile(t *testing.T) {
	for _, tc := range []struct{ name, extra, key string }{
		{"header name", "    headers: {'X Trace': abc}\n", "destinations[0].headers"},
		{"header value", "    headers: {'X-Trace': \"a\\r\\nInjected: 1\"}\n", "destinations[0].headers"},
		{"status override", "    status_overrides:\n      - {status: 'abc', class: permanent}\n", "destinations[0].status_overrides[0].status"},
		{"secret", "    secret: 'whsec_not*base64'\n", "destinations[0].secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(hostileBase+tc.extra), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.key+":") || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("Parse = %v, want an error naming %s with its line", err, tc.key)
			}
		})
	}
}

// A setting of another destination type was accepted and dropped (headers
// on a NATS destination were never sent): refused, naming the key and its
// line, as a source's are.
func TestAnotherTypesSettingIsRefused(t *testing.T) {
	dest := func(typ, url, extra string) string {
		return "destinations:\n  - name: d\n    type: " + typ + "\n    url: " + url + "\n" + extra
	}
	for _, tc := range []struct{ yaml, key, typ string }{
		{dest("nats", "nats://127.0.0.1:4222", "    headers: {X-A: b}\n"), "headers", "webhook"},
		{dest("rabbitmq", "amqp://127.0.0.1:5672", "    headers: {X-A: b}\n"), "headers", "webhook"},
		{dest("webhook", "http://x/y", "    subject: orders.{stream}\n"), "subject", "nats"},
		{dest("rabbitmq", "amqp://127.0.0.1:5672", "    stream: ORDERS\n"), "stream", "nats"},
		{dest("webhook", "http://x/y", "    exchange: orders\n"), "exchange", "rabbitmq"},
		{dest("nats", "nats://127.0.0.1:4222", "    routing_key: r\n"), "routing_key", "rabbitmq"},
	} {
		_, err := Parse([]byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), "destinations[0]."+tc.key+":") || !strings.Contains(err.Error(), "line ") ||
			!strings.Contains(err.Error(), "only of "+tc.typ+" destinations") {
			t.Errorf("%s: Parse = %v, want destinations[0].%s refused with its line", tc.yaml, err, tc.key)
		}
	}
	// Each type's own settings are taken.
	for _, y := range []string{
		dest("webhook", "http://x/y", "    headers: {X-A: b}\n"),
		dest("nats", "nats://127.0.0.1:4222", "    subject: orders.x\n    stream: ORDERS\n"),
		dest("rabbitmq", "amqp://127.0.0.1:5672", "    exchange: orders\n    routing_key: r\n"),
	} {
		if _, err := Parse([]byte(y), env(nil)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}

// store.idempotency_window reaches the store; left out, the store's
// default applies.
func TestIdempotencyWindowReachesTheStore(t *testing.T) {
	c, err := Parse([]byte("store: {idempotency_window: 24h}\n"+hostileBase), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.StoreConfig().IdempotencyWindow; got != 24*time.Hour {
		t.Errorf("IdempotencyWindow = %v, want 24h", got)
	}
	c, err = Parse([]byte(hostileBase), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.StoreConfig().WithDefaults().IdempotencyWindow; got != store.DefaultIdempotencyWindow {
		t.Errorf("default IdempotencyWindow = %v", got)
	}
}

// A variable that holds a secret, put under a key that wants a number, a
// duration or a known word, is refused naming the variable: the error
// quoted the value, whole or as yaml cuts it ("s3cr3t-..."), into logs.
func TestSecretsUnderTheWrongKeyAreNotQuoted(t *testing.T) {
	const secret = "s3cr3t-hunter2-0123456789"
	for _, tc := range []struct{ name, yaml, key string }{
		{"number", "relay:\n  workers: ${SECRET}\n" + hostileBase, "relay.workers"},
		{"number in a block", "relay:\n  batch_size: ${SECRET}\n" + hostileBase, "relay.batch_size"},
		{"duration", "relay: {poll_interval: '${SECRET}'}\n" + hostileBase, "relay.poll_interval"},
		{"duration in a flow mapping", hostileBase + "    retry: {base: 1s, max: \"${SECRET}\"}\n", "retry.max"},
		{"word", hostileBase + "    ordering: ${SECRET}\n", "destinations[0].ordering"},
		{"listen", "listen: ${SECRET}\n" + hostileBase, "listen"},
		{"short secret", "relay:\n  workers: ${SECRET}\n" + hostileBase, "relay.workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := secret
			if tc.name == "short secret" {
				s = "hunter2"
			}
			_, err := Parse([]byte(tc.yaml), env(map[string]string{"SECRET": s}))
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.key) || !strings.Contains(msg, "${SECRET}") {
				t.Errorf("error %q does not name %s and ${SECRET}", msg, tc.key)
			}
			if strings.Contains(msg, s[:5]) {
				t.Errorf("error %q quotes the secret", msg)
			}
		})
	}
	// A secret holding a quote, a backslash, a tab or a line break: the
	// problem spells it escaped (%q), and it was quoted as the problem
	// spelt it.
	for _, s := range []string{`hunter2"s3cr3t`, `Sup3r\S3cr3t`, "Sup3r\tS3cr3t", "Sup3r\nS3cr3t", "s3cr3t-\"-0123456789-long"} {
		for _, yaml := range []string{"relay:\n  workers: ${SECRET}\n" + hostileBase, hostileBase + "    ordering: \"${SECRET}\"\n"} {
			_, err := Parse([]byte(yaml), env(map[string]string{"SECRET": s}))
			if err == nil {
				t.Fatalf("%q: Parse accepted the file", s)
			}
			if msg := err.Error(); strings.Contains(msg, "3cr3t") || !strings.Contains(msg, "${SECRET}") {
				t.Errorf("%q: error %q quotes the secret, or does not name ${SECRET}", s, msg)
			}
		}
	}
	// Numbers stay quoted: they are what the operator needs to see.
	_, err := Parse([]byte("relay:\n  workers: ${W}\n"+hostileBase), env(map[string]string{"W": "-3"}))
	if err == nil || !strings.Contains(err.Error(), "relay.workers") {
		t.Fatalf("Parse = %v, want workers refused", err)
	}
	_, err = Parse([]byte(hostileBase+"    retry:\n      max_attempts: ${N}\n"), env(map[string]string{"N": "0"}))
	if err == nil || !strings.Contains(err.Error(), "got 0") {
		t.Errorf("Parse = %v, want the 0 quoted", err)
	}
}

// store.vacuum: false turns the leader's vacuum off; left out, or true, it
// is on; a value that is not a boolean is refused naming the key.
func TestStoreVacuumReachesTheRelay(t *testing.T) {
	for _, c := range []struct {
		yaml     string
		noVacuum bool
	}{
		{"", false},
		{"store: {vacuum: true}\n", false},
		{"store: {vacuum: false}\n", true},
	} {
		cfg, err := Parse([]byte(c.yaml+hostileBase), env(nil))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		rc, closers, err := cfg.RelayConfig(context.Background(), nil)
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		for _, tr := range closers {
			_ = tr.Close()
		}
		if rc.NoVacuum != c.noVacuum {
			t.Errorf("%q: NoVacuum = %v, want %v", c.yaml, rc.NoVacuum, c.noVacuum)
		}
	}
	if _, err := Parse([]byte("store: {vacuum: sometimes}\n"+hostileBase), env(nil)); err == nil || !strings.Contains(err.Error(), "vacuum") {
		t.Errorf("vacuum: sometimes: %v, want an error naming the key", err)
	}
}
