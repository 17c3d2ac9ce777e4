package config

import (
	"strings"
	"testing"
)

// A NATS destination whose subject no message can be published to (a
// wildcard, an empty token, a space) passed config check and serve started:
// every message then failed as a permanent fault of the message and went to
// the dead-letter queue. A stream name the transport refuses passed config
// check too, and serve then refused it without naming the key. Both are
// refused, naming the key and its line.
func TestNATSSubjectNoMessageCanTakeIsRefused(t *testing.T) {
	dest := func(extra string) string {
		return "destinations:\n  - name: audit\n    type: nats\n    url: nats://127.0.0.1:4222\n" + extra
	}
	for _, tc := range []struct{ yaml, key string }{
		{dest("    subject: \"audit.*\"\n"), "subject"},
		{dest("    subject: \"audit.>\"\n"), "subject"},
		{dest("    subject: \"audit orders\"\n"), "subject"},
		{dest("    subject: \"audit..{type}\"\n"), "subject"},
		{dest("    subject: \"audit.{type}.\"\n"), "subject"},
		{dest("    stream: \"ORDERS.EU\"\n"), "stream"},
		{dest("    stream: \"ORDERS EU\"\n"), "stream"},
	} {
		_, err := Parse([]byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), "destinations[0]."+tc.key+":") || !strings.Contains(err.Error(), "line 5") {
			t.Errorf("%s: Parse = %v, want destinations[0].%s refused with its line", tc.yaml, err, tc.key)
		}
	}
	// Templates some message can take are accepted.
	for _, y := range []string{
		dest("    subject: \"audit.{type}\"\n"),
		dest("    subject: \"audit.{stream}.{id}\"\n"),
		dest("    subject: \"{destination}.{type}\"\n"),
		dest("    subject: audit\n    stream: AUDIT\n"),
		dest(""),
	} {
		if _, err := Parse([]byte(y), env(nil)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}
