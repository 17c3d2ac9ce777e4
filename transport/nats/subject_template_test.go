package natstransport_test

import (
	"strings"
	"testing"

	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestSubjectNoMessageCanTakeIsRefusedAtNew: a Config.Subject no message
// could be published to (a wildcard or empty token, white space) was taken
// by New, and every Deliver then failed as a permanent fault of the
// message, dead-lettering all of them. New refuses it, naming the field.
func TestSubjectNoMessageCanTakeIsRefusedAtNew(t *testing.T) {
	t.Parallel()
	for _, subject := range []string{"audit.*", "audit.>", "audit orders", "audit..{type}", ".{type}", "a\x00b"} {
		tr, err := natstransport.New(natstransport.Config{URL: "nats://127.0.0.1:1", Subject: subject})
		if err == nil {
			_ = tr.Close()
			t.Errorf("New with Subject %q: no error, want Config.Subject refused", subject)
			continue
		}
		if !strings.Contains(err.Error(), "Config.Subject") {
			t.Errorf("New with Subject %q = %v, want it to name Config.Subject", subject, err)
		}
	}
}
