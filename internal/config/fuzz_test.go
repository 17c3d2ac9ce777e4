package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/config"
)

// fuzzSeed is a configuration using most settings.
const fuzzSeed = `listen: 127.0.0.1:8080
db: postgres://backstop:pa55word@127.0.0.1:5432/app?sslmode=disable
relay: {workers: 8, poll_interval: 250ms}
store: {lease: 20s}
destinations:
  - name: orders
    type: webhook
    url: https://hooks.example.com/in
    secret: ${SECRET}
    timeout: 5s
    ordering: strict
    retry: {strategy: exponential, base: 30s, multiplier: 2, max: 1h, jitter: 0.25, max_attempts: 10}
    inner_retry: {attempts: 3, delay: 1s}
    breaker: {max_failures: 5, timeout: 60s, half_open_max_requests: 1}
    rate_limit: {per_second: 50, burst: 10}
    unknown_errors: permanent
    status_overrides:
      - {status: "404", class: permanent, blame: message}
  - {name: audit, type: nats, url: "nats://127.0.0.1:4222", ordering: none}
routes:
  - {topic: "order.*", to: [orders, audit]}
tokens:
  - {name: ops, token: "${TOKEN}", role: operate}
`

func fuzzEnv(k string) (string, bool) {
	switch k {
	case "SECRET":
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true
	case "TOKEN":
		return "operate-token-0123456789", true
	}
	return "", false
}

// FuzzParse feeds the configuration parser arbitrary files: it never
// panics; it refuses with errors that are all *config.Error, whose lines
// lie within the file; it decides the same way twice; and a file it
// accepts gives a store configuration that validates and a summary that
// does not show the database's password.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		fuzzSeed,
		"",
		"destinations: []",
		"destinations:\n  - {name: a, type: webhook, url: 'http://x/'}\n",
		"destinations:\n  - {name: a, type: webhook, url: 'http://x/'}\nsources:\n  - {inbox: in, type: nats, url: 'nats://x:4222', stream: S, consumer: c, stream_key: subject, forward: {to: [a]}}\n  - {inbox: h, type: http, path: /in, secret: '${SECRET}', forward: {to: [a]}}\n",
		"destinations:\n  - {name: a, type: webhook, url: 'http://x/', timeout: -5s}\n",
		"destinations:\n  - {name: a, type: webhook, url: 'http://x/', retry: {base: 1e400h}}\n",
		"destinations:\n  - {name: a, type: webhook, url: '${UNSET}'}\n",
		"destinations:\n  - {name: a, type: smtp}\n  - {name: a, type: webhook}\n",
		"listen: [1, 2]\n",
		"relay: {workers: 99999999999999999999}\n",
		"destinations: &a [*a]\n",
		"a: &a [*a, *a, *a, *a]\nb: &b [*a, *a, *a, *a]\n",
		"%YAML 1.1\n---\n!!binary abc\n",
		"destinations:\n  - name: \"\\0\\x01\\u202e\"\n    type: webhook\n    url: \"http://h/\"\n",
		"\xff\xfe\x00",
		"tokens: [{name: t, token: short, role: admin}]\n",
		"routes: [{topic: '**', to: [nowhere]}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, fuzzEnv)
		c2, err2 := config.Parse(data, fuzzEnv)
		if (err == nil) != (err2 == nil) || (err != nil && !sameProblems(err, err2)) || (err == nil && !reflect.DeepEqual(c, c2)) {
			t.Fatalf("Parse decided differently twice: %v / %v", err, err2)
		}
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a configuration with the error %v", err)
			}
			// YAML breaks lines at \n, \r and \r\n; an error at the end
			// of the input may name the line after the last.
			lines := strings.Count(string(data), "\n") + strings.Count(string(data), "\r") + 2
			for _, e := range flatten(err) {
				var ce *config.Error
				if !errors.As(e, &ce) {
					t.Fatalf("Parse error %q (%T) is not a *config.Error", e, e)
				}
				if ce.Line < 0 || ce.Line > lines {
					t.Fatalf("%v names line %d of a %d-line file", ce, ce.Line, lines)
				}
				if e.Error() == "" {
					t.Fatal("an empty error")
				}
			}
			return
		}
		if err := c.StoreConfig().Validate(); err != nil {
			t.Fatalf("an accepted file gives a store configuration that does not validate: %v", err)
		}
		sum := c.Summary()
		if i := strings.Index(c.DB, "://"); i >= 0 {
			if at := strings.LastIndex(c.DB, "@"); at > i {
				if _, pw, ok := strings.Cut(c.DB[i+3:at], ":"); ok && len(pw) >= 4 && !strings.Contains(strings.Replace(c.DB, pw, "", 1), pw) &&
					strings.Contains(sum, ":"+pw+"@") {
					t.Fatalf("Summary shows the database password: %q", sum)
				}
			}
		}
	})
}

// sameProblems reports whether a and b list the same problems, about the
// same keys, on the same lines, in the same order. (This target found that
// an unset ${VAR} in a flow mapping such as "- {8789: 2, 779A: '${A}'}"
// named one of the line's keys at random; expand now names the key it
// expands, and keyAt breaks ties by name.)
func sameProblems(a, b error) bool {
	ea, eb := flatten(a), flatten(b)
	if len(ea) != len(eb) {
		return false
	}
	for i := range ea {
		var ca, cb *config.Error
		if !errors.As(ea[i], &ca) || !errors.As(eb[i], &cb) {
			return ea[i].Error() == eb[i].Error()
		}
		if ca.Line != cb.Line || ca.Problem != cb.Problem || ca.Key != cb.Key {
			return false
		}
	}
	return true
}

// flatten returns the errors joined in err.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
