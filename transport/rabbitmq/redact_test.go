package rabbitmq_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/transport/rabbitmq"
)

// TestNewHidesAPasswordThatBreaksTheURL: a URL that does not parse (a
// password holding an unescaped '#', a bad escape after it) is refused
// without any part of the password. amqp's error quoted the URL up to
// where it broke, and what it read as a port.
func TestNewHidesAPasswordThatBreaksTheURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"amqp://guest:Sesame#Pw@127.0.0.1:1/", "amqp://guest:SesamePw@127.0.0.1:1/%zz"} {
		_, err := rabbitmq.New(rabbitmq.Config{URL: u})
		if err == nil || !strings.Contains(err.Error(), "Config.URL") {
			t.Errorf("New(%q) = %v, want an error naming Config.URL", u, err)
			continue
		}
		if strings.Contains(err.Error(), "Sesame") {
			t.Errorf("New(%q) error %q shows the password", u, err)
		}
	}
}
