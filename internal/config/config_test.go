package config

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

const full = `listen: 127.0.0.1:8080
db: sqlite:./backstop.db
destinations:
  - name: orders
    type: webhook
    url: http://127.0.0.1:9000/hook
    secret: ${ORDERS_WEBHOOK_SECRET}
    timeout: 5s
    ordering: strict
    retry: {strategy: exponential, base: 30s, multiplier: 2, max: 1h, jitter: 0.25, max_attempts: 10}
    inner_retry: {attempts: 3, delay: 1s}
    breaker: {max_failures: 5, timeout: 60s, half_open_max_requests: 1}
    rate_limit: {per_second: 50, burst: 10}
    unknown_errors: permanent
    status_overrides:
      - {status: "404", class: permanent, blame: message}
  - name: audit
    type: nats
    url: nats://127.0.0.1:4222
    ordering: none
routes:
  - {topic: "order.*", to: [orders, audit]}
tokens:
  - {name: ops, token: "${OPS_TOKEN}", role: operate}
  - {name: dashboards, token: "read-only-token-0123", role: read}
`

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(full), env(map[string]string{"ORDERS_WEBHOOK_SECRET": "whsec_abc", "OPS_TOKEN": "operate-token-0123456"}))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Destinations[0]
	if d.Secret != "whsec_abc" || d.Timeout.D() != 5*time.Second || d.Retry.MaxAttempts != 10 || d.RateLimit.Burst != 10 {
		t.Errorf("orders = %+v", d)
	}
	if c.Tokens[0].Token != "operate-token-0123456" || c.Tokens[1].Role != "read" {
		t.Errorf("tokens = %+v", c.Tokens)
	}
	a := c.Destinations[1]
	if a.Retry.Base.D() != DefaultRetryBase || a.Breaker.MaxFailures != DefaultBreakerFails || a.Timeout.D() != DefaultTimeout {
		t.Errorf("audit defaults = %+v", a)
	}
	if got := c.RouteTopic("order.created"); strings.Join(got, ",") != "orders,audit" {
		t.Errorf("order.created routes to %v", got)
	}
	if got := c.RouteTopic("invoice.created"); len(got) != 0 {
		t.Errorf("invoice.created routes to %v", got)
	}
	sc := c.StoreConfig()
	if p := sc.Policies["audit"]; p.Ordering != outbox.OrderingNone || p.MaxAttempts != 10 {
		t.Errorf("audit policy %+v", p)
	}
	if d := sc.Policies["orders"].Strategy.Delay(1); d < 20*time.Second || d > 40*time.Second {
		t.Errorf("orders' first retry after %s, want 30s ± 25%%", d)
	}
}

func TestParseMinimalDefaults(t *testing.T) {
	c, err := Parse([]byte("destinations:\n  - {name: hook, type: webhook, url: 'http://x/y'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.DB != DefaultDB || c.Relay.Workers != DefaultWorkers || c.Destinations[0].Ordering != "strict" {
		t.Errorf("defaults not applied: %+v", c)
	}
	rc, trs, err := c.RelayConfig(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer trs[0].Close()
	if rc.Destinations["hook"].Breaker.MaxFailures != 5 || rc.Destinations["hook"].InProcess.MaxAttempts != 3 {
		t.Errorf("relay destination %+v", rc.Destinations["hook"])
	}
	if rc.BatchSize != 0 || rc.MaxBatchSize != 0 || rc.PrefetchBytes != 0 {
		t.Errorf("prefetch not left to the relay's defaults: %d %d %d", rc.BatchSize, rc.MaxBatchSize, rc.PrefetchBytes)
	}
}

func TestParsePrefetch(t *testing.T) {
	c, err := Parse([]byte("relay: {batch_size: 64, max_batch_size: 1024, prefetch_bytes: 8388608}\n"+
		"destinations:\n  - {name: hook, type: webhook, url: 'http://x/y'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	rc, trs, err := c.RelayConfig(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer trs[0].Close()
	if rc.BatchSize != 64 || rc.MaxBatchSize != 1024 || rc.PrefetchBytes != 8<<20 {
		t.Errorf("prefetch %d %d %d", rc.BatchSize, rc.MaxBatchSize, rc.PrefetchBytes)
	}
}

// Each bad file is refused with an error naming the key and its line.
func TestParseRefuses(t *testing.T) {
	base := "destinations:\n  - name: hook\n    type: webhook\n    url: http://x/y\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", base + "    retries: 3\n", []string{"line 5", "destinations[0].retries", "unknown key", "retry"}},
		{"unknown nested key", base + "    retry: {bse: 1s}\n", []string{"line 5", "destinations[0].retry.bse", "unknown key"}},
		{"top-level typo", "listn: x\n" + base, []string{"line 1", "listn", "did you mean listen"}},
		{"bad duration", base + "    timeout: 5 seconds\n", []string{"line 5", "destinations[0].timeout", `bad duration "5 seconds"`}},
		{"negative duration", base + "    timeout: -1s\n", []string{"line 5", "must not be negative"}},
		{"bad ordering", base + "    ordering: sorted\n", []string{"line 5", "destinations[0].ordering", `"sorted" is not one of strict, release, none`}},
		{"bad type", "destinations:\n  - {name: a, type: kafka, url: 'http://x'}\n", []string{"line 2", "destinations[0].type", "kafka"}},
		{"wrong value type", base + "    breaker: {max_failures: many}\n", []string{"line 5", "destinations[0].breaker.max_failures", "many"}},
		{"missing env", base + "    secret: ${NOPE_SECRET}\n", []string{"line 5", "destinations[0].secret", "NOPE_SECRET is not set"}},
		{"missing env in a flow mapping", "destinations:\n  - {name: hook, type: webhook, url: '${NOPE_URL}', timeout: 5s}\n",
			[]string{"line 2", "destinations[0].url:", "NOPE_URL is not set"}},
		{"unknown route target", base + "routes:\n  - {topic: 'a.*', to: [hook, nowhere]}\n", []string{"line 6", "routes[0].to[1]", `unknown destination "nowhere"`}},
		{"bad pattern", base + "routes:\n  - {topic: 'a*b', to: [hook]}\n", []string{"routes[0].topic"}},
		{"duplicate name", base + "  - {name: hook, type: webhook, url: 'http://z/'}\n", []string{"line 5", "destinations[1].name", "named twice"}},
		{"short token", base + "tokens:\n  - {name: a, token: short}\n", []string{"line 6", "tokens[0].token", "at least 16"}},
		{"bad role", base + "tokens:\n  - {name: a, token: 0123456789abcdefgh, role: admin}\n", []string{"tokens[0].role", "admin"}},
		{"no destinations", "listen: 127.0.0.1:1\n", []string{"destinations", "at least one"}},
		{"scheme", "destinations:\n  - {name: a, type: nats, url: 'http://x'}\n", []string{"destinations[0].url", "scheme"}},
		{"jitter", base + "    retry: {jitter: 2}\n", []string{"destinations[0].retry.jitter"}},
		{"not yaml", "destinations: [\n", []string{"line"}},
		{"control chars", base + "    headers: {X-A: \"\\0\"}\n    bogus\x01: 1\n", []string{"control characters"}},
		{"reserved topic name", "destinations:\n  - {name: topic, type: webhook, url: 'http://x/'}\nroutes:\n  - {topic: 'a.*', to: [topic]}\n", []string{"line 3", "routes", "reserved"}},
		{"bad db", "db: mysql://x\n" + base, []string{"line 1", "db", "mysql"}},
		{"negative batch size", "relay: {batch_size: -1}\n" + base, []string{"line 1", "relay.batch_size", "must not be negative"}},
		{"max batch below batch", "relay:\n  batch_size: 512\n  max_batch_size: 100\n" + base,
			[]string{"line 3", "relay.max_batch_size", "must not be less than relay.batch_size (512)"}},
		{"negative prefetch bytes", "relay: {prefetch_bytes: -5}\n" + base, []string{"line 1", "relay.prefetch_bytes", "must not be negative"}},
		{"prefetch bytes not a number", "relay: {prefetch_bytes: 64MiB}\n" + base, []string{"line 1", "relay.prefetch_bytes", "64MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) && tc.name != "not yaml" {
				t.Errorf("error %T is not a *config.Error", err)
			}
		})
	}
}
