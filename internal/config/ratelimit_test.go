package config

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/relay"
)

// TestRateLimitGoesToTheRelay: rate_limit is the relay's RateLimit of the
// destination, burst 1 when left out, and the transport is not wrapped:
// the relay's scheduler holds a message waiting for its token, without a
// worker and before its timeout starts. Concurrency is left to the relay's
// default; it no longer has to keep deliveries from waiting out their
// timeout for a token. Before, the transport waited for the token inside
// the delivery's timeout: with per_second 0.01 every delivery but the
// first timed out there and opened the breaker of a destination that had
// failed nothing.
func TestRateLimitGoesToTheRelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dest string
		want *relay.RateLimit
		conc int
	}{
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 0.01}}", &relay.RateLimit{PerSecond: 0.01, Burst: 1}, 0},
		{"{name: h, type: webhook, url: 'http://x/y', rate_limit: {per_second: 50, burst: 10}, concurrency: 8}", &relay.RateLimit{PerSecond: 50, Burst: 10}, 8},
		{"{name: h, type: webhook, url: 'http://x/y'}", nil, 0},
	} {
		c, err := Parse([]byte("destinations:\n  - "+tc.dest+"\n"), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		rc, trs, err := c.RelayConfig(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		trs[0].Close()
		d := rc.Destinations["h"]
		switch got := d.RateLimit; {
		case (got == nil) != (tc.want == nil), got != nil && *got != *tc.want:
			t.Errorf("%s: RateLimit %+v, want %+v", tc.dest, got, tc.want)
		}
		if d.Transport != trs[0] {
			t.Errorf("%s: the transport is wrapped (%T)", tc.dest, d.Transport)
		}
		if d.Concurrency != tc.conc {
			t.Errorf("%s: concurrency %d, want %d", tc.dest, d.Concurrency, tc.conc)
		}
	}
}
