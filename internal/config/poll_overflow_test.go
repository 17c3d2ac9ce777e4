package config

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// store.instance_timeout must be more than twice the relay's longest poll
// wait, or the relay refuses to start. Twice a relay.poll_interval over
// 146 years overflowed into a negative duration and the check passed:
// config check said ok, and serve stopped with "relay: MaxPollInterval
// must be less than half the store's InstanceTimeout".
func TestHugePollIntervalDoesNotOverflowTheInstanceTimeoutCheck(t *testing.T) {
	y := "relay:\n  poll_interval: 1600000h\ndestinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n"
	c, err := Parse([]byte(y), env(nil))
	if err == nil {
		rc, trs, rerr := c.RelayConfig(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		for _, tr := range trs {
			_ = tr.Close()
		}
		t.Fatalf("Parse = ok (relay config %v, poll interval %v), want store.instance_timeout refused", rerr, rc.PollInterval)
	}
	if !strings.Contains(err.Error(), "store.instance_timeout:") {
		t.Fatalf("Parse = %v, want store.instance_timeout refused", err)
	}
}
