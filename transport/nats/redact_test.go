package natstransport_test

import (
	"strings"
	"testing"
	"time"

	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestNewHidesAPasswordThatBreaksTheURL: a URL whose password holds a
// character that breaks it (an unescaped '#' or a space) is refused
// naming the server and showing no part of the password. The error
// quoted the whole URL, and nats.go's the URL up to the '#' and what it
// read as a port.
func TestNewHidesAPasswordThatBreaksTheURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"nats://bob:Sesame#Pw@127.0.0.1:1", "nats://bob:Sesame Pw@127.0.0.1:1", "nats://bob:1#Sesame@127.0.0.1:1"} {
		_, err := natstransport.New(natstransport.Config{URL: u, Timeout: 200 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "connect to nats://127.0.0.1:1") {
			t.Errorf("New(%q) = %v, want an error naming nats://127.0.0.1:1", u, err)
			continue
		}
		if strings.Contains(err.Error(), "Sesame") {
			t.Errorf("New(%q) error %q shows the password", u, err)
		}
	}
}
