package webhook_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// A receiver that answers 2xx at once and then never finishes the body
// (a framework that streams, a proxy that holds the connection, HTTP/1.0
// without Content-Length): the message is delivered the moment the status
// arrives, yet Deliver went on draining the body for the whole Timeout,
// holding the relay's worker (and the message's lease) for it: with a 10 s
// timeout, each delivery to such a receiver took 10 s instead of
// milliseconds. The same for the drain after an error answer, once its
// excerpt is read.
func TestUnfinishedBodyDoesNotHoldTheDelivery(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			tr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "100000")
				w.WriteHeader(status)
				_, _ = w.Write(make([]byte, 4<<10)) // more than the error excerpt, less than promised
				w.(http.Flusher).Flush()
				select { // and nothing more
				case <-r.Context().Done():
				case <-time.After(time.Minute):
				}
			}, webhook.Config{Timeout: 30 * time.Second})
			start := time.Now()
			err := tr.Deliver(context.Background(), message())
			took := time.Since(start)
			if (err == nil) != (status == http.StatusOK) {
				t.Fatalf("Deliver = %v for %d", err, status)
			}
			// The fixed drain gives up after 250 ms; a third of the Timeout
			// leaves room for a loaded machine and still tells the two apart.
			if took > 10*time.Second {
				t.Fatalf("Deliver took %v after a %d whose body never ended (Timeout 30 s): the answer was known at once", took.Round(time.Millisecond), status)
			}
		})
	}
}
