package rabbitinbox

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestPrefetchOverTheProtocolsRange: basic.qos carries the prefetch count
// as an AMQP short (0 to 65535), and the library casts it: 65536 went to
// the broker as 0, which means no limit at all (the broker sends the
// whole queue ahead, and past consumer_timeout closes the channel), and
// 65537 as 1. New took both; it must refuse them.
func TestPrefetchOverTheProtocolsRange(t *testing.T) {
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	in := e.NewInbox(e.Config())
	for _, n := range []int{65536, 65537, 1 << 20} {
		_, err := New(Config{Inbox: in, URL: "amqp://127.0.0.1:5672/", Queue: "q", Prefetch: n})
		if err == nil || !strings.Contains(err.Error(), "Prefetch") {
			t.Errorf("New with Prefetch %d: %v, want an error naming Prefetch", n, err)
		}
	}
	if _, err := New(Config{Inbox: in, URL: "amqp://127.0.0.1:5672/", Queue: "q", Prefetch: 65535}); err != nil {
		t.Errorf("New with Prefetch 65535: %v", err)
	}
}
