package rabbitinbox

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestDialErrorHidesThePassword: a URL whose password holds a character
// that breaks it (an unescaped '#') fails to dial with an error that shows
// no part of the password. amqp's error quoted the URL up to the '#' and
// read the password as a port.
func TestDialErrorHidesThePassword(t *testing.T) {
	t.Parallel()
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	in := e.NewInbox(e.Config())
	r, err := New(Config{Inbox: in, URL: "amqp://guest:Sesame#Pw@127.0.0.1:5672/", Queue: "q", Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(e.Ctx)
	if err == nil {
		t.Fatal("Run with a URL that does not parse returned nil")
	}
	for _, s := range []string{"Sesame", "Pw@"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("Run's error %q shows the password (%q)", err, s)
		}
	}
	if !strings.Contains(err.Error(), "Config.URL") {
		t.Errorf("Run's error %q does not name Config.URL", err)
	}
}
