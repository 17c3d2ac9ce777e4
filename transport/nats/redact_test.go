package natstransport_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestNewHidesAPasswordThatBreaksTheURL: a URL whose password holds a
// character that breaks it (an unescaped '#' or a space) is refused, or
// reported unreachable in a warning, naming the server and showing no
// part of the password. The error quoted the whole URL, and nats.go's the
// URL up to the '#' and what it read as a port.
func TestNewHidesAPasswordThatBreaksTheURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"nats://bob:Sesame#Pw@127.0.0.1:1", "nats://bob:Sesame Pw@127.0.0.1:1", "nats://bob:1#Sesame@127.0.0.1:1"} {
		var log bytes.Buffer
		tr, err := natstransport.New(natstransport.Config{URL: u, Timeout: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if tr != nil {
			_ = tr.Close()
		}
		said := log.String()
		if err != nil {
			said += err.Error()
		}
		if !strings.Contains(said, "nats://127.0.0.1:1") {
			t.Errorf("New(%q) = %v, logging %q; want the error or the warning naming nats://127.0.0.1:1", u, err, log.String())
		}
		if strings.Contains(said, "Sesame") {
			t.Errorf("New(%q) says %q: it shows the password", u, said)
		}
	}
}
