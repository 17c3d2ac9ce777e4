package webhook_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

// TestRetryAfterDateIsReadOnTheReceiversClock: a receiver whose clock
// disagrees with the sender's answers 429 with Retry-After as an HTTP
// date, 30 s ahead of its own Date. The date is a time on the receiver's
// clock, which its Date header gives: the wait is 30 s whatever the
// sender's clock says. Read against the sender's clock, a receiver ten
// minutes ahead paused the destination for 10m30s, and one ten minutes
// behind had its request for a pause ignored (a date in the past).
func TestRetryAfterDateIsReadOnTheReceiversClock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		skew time.Duration // the receiver's clock minus the sender's
	}{
		{"receiver ahead 10m", 10 * time.Minute},
		{"receiver behind 10m", -10 * time.Minute},
		{"receiver ahead 3h", 3 * time.Hour},
		{"same clock", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			theirs := epoch.Add(c.skew)
			h := func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Date", theirs.Format(http.TimeFormat))
				w.Header().Set("Retry-After", theirs.Add(30*time.Second).Format(http.TimeFormat))
				w.WriteHeader(http.StatusTooManyRequests)
			}
			tr, _ := serve(t, h, webhook.Config{})
			_, err := deliver(t, tr)
			got, ok := errorhandling.RetryAfterOf(err)
			if !ok || got != 30*time.Second {
				t.Fatalf("RetryAfter = %v (%v) from a receiver %v off the sender's clock, want 30s", got, ok, c.skew)
			}
		})
	}
}
