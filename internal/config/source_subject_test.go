package config

import (
	"strings"
	"testing"
)

// A NATS source's filter subject that the client refuses (white space, an
// empty token, '>' before the last token) passed config check; serve then
// refused it with "consumer c on stream S: nats: invalid subject name",
// naming no key. Refused here, naming sources[0].subject and its line.
func TestNATSSourceInvalidFilterSubjectIsRefused(t *testing.T) {
	src := func(subject string) string {
		return "destinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n" +
			"sources:\n  - inbox: in\n    type: nats\n    url: nats://127.0.0.1:4222\n    stream: S\n    consumer: c\n" +
			"    subject: \"" + subject + "\"\n    forward: {to: [w]}\n"
	}
	for _, subject := range []string{"orders x", "orders.>.x", "orders..x", ".orders", "orders."} {
		_, err := Parse([]byte(src(subject)), env(nil))
		if err == nil || !strings.Contains(err.Error(), "line 9: sources[0].subject:") {
			t.Errorf("subject %q: Parse = %v, want sources[0].subject refused with its line", subject, err)
		}
	}
	for _, subject := range []string{"orders.>", "orders.*.created", "orders", ">", "*"} {
		if _, err := Parse([]byte(src(subject)), env(nil)); err != nil {
			t.Errorf("subject %q: %v", subject, err)
		}
	}
}
