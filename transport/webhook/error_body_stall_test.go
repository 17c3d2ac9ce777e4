package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

// A receiver that answers an error status at once and then stalls within
// the first bytes of its body (HTTP/1.0 without Content-Length, a proxy
// holding the connection, a Content-Length it never fulfils): the answer,
// and so the verdict, is known the moment the status arrives, but Deliver
// read the error's excerpt with no bound but the whole Timeout, holding the
// relay's worker and the message's lease for it. The drain after the
// excerpt is bounded (TestUnfinishedBodyDoesNotHoldTheDelivery); the
// excerpt itself was not, when the body stalls before MaxResponseBody bytes.
func TestStalledErrorBodyDoesNotHoldTheDelivery(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusBadRequest} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			tr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(status)
				_, _ = w.Write([]byte("busy")) // fewer bytes than the excerpt takes, fewer than promised
				w.(http.Flusher).Flush()
				select { // and nothing more
				case <-r.Context().Done():
				case <-release:
				}
			}, webhook.Config{Timeout: time.Minute})
			done := make(chan error, 1)
			go func() { done <- tr.Deliver(context.Background(), message()) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				close(release) // let Deliver end
				<-done
				t.Fatalf("Deliver still reading the body of a %d 15 s after its status arrived (Timeout 1 min): the answer was known at once", status)
			}
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != status || se.Body != "busy" {
				t.Fatalf("Deliver = %v, want a StatusError %d quoting the body's start", err, status)
			}
			v := errorhandling.NewErrorClassifier().Classify(err)
			if wantPermanent := status < 500; (v.Class == errorhandling.ClassPermanent) != wantPermanent {
				t.Fatalf("class %s for %d", v.Class, status)
			}
			if errors.Is(err, webhook.ErrTimeout) {
				t.Fatalf("Deliver = %v: an answered request is not a timeout", err)
			}
		})
	}
}
