package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

const (
	transient = errorhandling.ClassTransient
	permanent = errorhandling.ClassPermanent
	dest      = errorhandling.BlameDestination
	msg       = errorhandling.BlameMessage
)

// TestEveryStatusClass runs each kind of answer through a real local
// server and the default classifier.
func TestEveryStatusClass(t *testing.T) {
	t.Parallel()
	type verdict struct {
		class  errorhandling.Class
		blame  errorhandling.Blame
		reason errorhandling.FailureReason
		code   string
	}
	destination := func(reason errorhandling.FailureReason, code string) *verdict {
		return &verdict{transient, dest, reason, code}
	}
	message := func(code string) *verdict {
		return &verdict{permanent, msg, errorhandling.ReasonValidationFailure, code}
	}
	for _, c := range []struct {
		status int
		want   *verdict // nil: delivered
	}{
		{200, nil}, {201, nil}, {202, nil}, {204, nil}, {299, nil},
		{301, destination(errorhandling.ReasonTransportUnavailable, "http_301")},
		{302, destination(errorhandling.ReasonTransportUnavailable, "http_302")},
		{307, destination(errorhandling.ReasonTransportUnavailable, "http_307")},
		{308, destination(errorhandling.ReasonTransportUnavailable, "http_308")},
		{400, message("http_400")},
		{401, destination(errorhandling.ReasonDependencyFailure, "unauthorized")},
		{403, destination(errorhandling.ReasonDependencyFailure, "forbidden")},
		{404, destination(errorhandling.ReasonDependencyFailure, "not_found")},
		{405, destination(errorhandling.ReasonDependencyFailure, "method_not_allowed")},
		{408, destination(errorhandling.ReasonTimeoutExceeded, "timeout")},
		{409, message("http_409")},
		{410, destination(errorhandling.ReasonDependencyFailure, "gone")},
		{413, message("http_413")},
		{415, message("http_415")},
		{418, message("http_418")},
		{421, destination(errorhandling.ReasonDependencyFailure, "misdirected_request")},
		{422, message("http_422")},
		{425, destination(errorhandling.ReasonTransportUnavailable, "http_425")},
		{429, destination(errorhandling.ReasonTransportUnavailable, "rate_limit")},
		{451, message("http_451")},
		{500, destination(errorhandling.ReasonTransportUnavailable, "http_500")},
		{502, destination(errorhandling.ReasonTransportUnavailable, "http_502")},
		{503, destination(errorhandling.ReasonTransportUnavailable, "service_unavailable")},
		{504, destination(errorhandling.ReasonTimeoutExceeded, "timeout")},
		{599, destination(errorhandling.ReasonTransportUnavailable, "http_599")},
		{600, destination(errorhandling.ReasonTransportUnavailable, "http_600")},
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			tr, _ := serve(t, answer(c.status, `{"error":"the reason"}`, "Location", "https://new.example.com/h"), webhook.Config{})
			v, err := deliver(t, tr)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Deliver = %v, want nil", err)
				}
				return
			}
			wantVerdict(t, v, c.want.class, c.want.blame, c.want.reason)
			if v.Code != c.want.code {
				t.Errorf("Code = %q, want %q", v.Code, c.want.code)
			}
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != c.status {
				t.Fatalf("error %v does not wrap a StatusError for %d", err, c.status)
			}
			if c.status >= 400 && !strings.Contains(err.Error(), "the reason") {
				t.Errorf("error %q lacks the response body", err)
			}
			if redirect := c.status >= 300 && c.status <= 399; errors.Is(err, webhook.ErrRedirect) != redirect {
				t.Errorf("errors.Is(err, ErrRedirect) = %v for %d", !redirect, c.status)
			}
		})
	}
}

// TestInformationalAsFinalAnswer: a 101 ends the exchange without a
// usable answer; the destination misbehaves.
func TestInformationalAsFinalAnswer(t *testing.T) {
	t.Parallel()
	tr, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
	}, webhook.Config{Timeout: 5 * time.Second})
	v, err := deliver(t, tr)
	wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
	var se *webhook.StatusError
	if !errors.As(err, &se) || se.StatusCode != 101 {
		t.Fatalf("error %v: want a StatusError for 101", err)
	}
}

// TestCredentialStopsWorking: a destination accepts, then refuses the
// key: the later messages wait as faults of the destination.
func TestCredentialStopsWorking(t *testing.T) {
	t.Parallel()
	var revoked atomic.Bool
	tr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if revoked.Load() {
			http.Error(w, "invalid API key", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}, webhook.Config{Headers: map[string]string{"Authorization": "Bearer k1"}})
	for i := range 3 {
		if _, err := deliver(t, tr); err != nil {
			t.Fatalf("Deliver #%d before the key was revoked: %v", i, err)
		}
	}
	revoked.Store(true)
	for i := range 3 {
		v, err := deliver(t, tr)
		wantVerdict(t, v, transient, dest, errorhandling.ReasonDependencyFailure)
		if v.Code != "unauthorized" || !strings.Contains(err.Error(), "invalid API key") {
			t.Fatalf("Deliver #%d after: code %q, error %v", i, v.Code, err)
		}
	}
}

func TestErrorTextHasStatusAndTruncatedBody(t *testing.T) {
	t.Parallel()
	body := "database\n\tconnection pool exhausted; " + strings.Repeat("x", 100)
	tr, _ := serve(t, answer(500, body), webhook.Config{
		MaxResponseBody: 40,
		Secret:          []byte("top-secret-key"),
	})
	_, err := deliver(t, tr)
	text := err.Error()
	for _, want := range []string{"500 Internal Server Error", `"database connection pool exhausted;`, "(truncated)"} {
		if !strings.Contains(text, want) {
			t.Errorf("error %q lacks %q", text, want)
		}
	}
	for _, leak := range []string{"xxxxxx", "top-secret-key", "4111-secret-payload"} {
		if strings.Contains(text, leak) {
			t.Errorf("error %q holds %q", text, leak)
		}
	}
}

func TestRedirectNamesLocationWithoutQuery(t *testing.T) {
	t.Parallel()
	tr, _ := serve(t, answer(301, "", "Location", "https://new.example.com/hooks?key=abc"), webhook.Config{})
	_, err := deliver(t, tr)
	if text := err.Error(); !strings.Contains(text, "https://new.example.com/hooks") || strings.Contains(text, "key=abc") {
		t.Fatalf("error %q: want the Location without its query", text)
	}
}

// A client of the caller's (for mTLS or a private CA) follows no redirect
// either: Go's client turned the POST answered 302 into a GET without the
// body, whose 200 counted as delivered while the payload never arrived.
func TestCallersClientFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var moved atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("/hooks", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/moved", status)
			})
			mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
				moved.Add(1)
				w.WriteHeader(http.StatusOK)
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			client := srv.Client()
			tr := newTransport(t, webhook.Config{URL: srv.URL + "/hooks", Client: client})
			err := tr.Deliver(context.Background(), message())
			if !errors.Is(err, webhook.ErrRedirect) || moved.Load() != 0 {
				t.Fatalf("Deliver = %v, %d requests to the new location; want ErrRedirect and none", err, moved.Load())
			}
			if client.CheckRedirect != nil {
				t.Fatal("the caller's client was changed")
			}
		})
	}
}

// blocking returns a handler that signals started and then blocks until
// release is closed or the client goes away.
func blocking(started chan<- struct{}, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func TestTimeoutIsTransientDestination(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	tr, _ := serve(t, blocking(started, release), webhook.Config{Timeout: 50 * time.Millisecond})
	v, err := deliver(t, tr)
	wantVerdict(t, v, transient, dest, errorhandling.ReasonTimeoutExceeded)
	if !errors.Is(err, webhook.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want ErrTimeout and context.DeadlineExceeded", err)
	}
	if v.Code != "timeout" {
		t.Errorf("Code = %q", v.Code)
	}
}

func TestCallerCancelIsNotATimeout(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	tr, _ := serve(t, blocking(started, release), webhook.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	err := tr.Deliver(ctx, message())
	if !errors.Is(err, context.Canceled) || errors.Is(err, webhook.ErrTimeout) {
		t.Fatalf("Deliver = %v, want context.Canceled and not ErrTimeout", err)
	}
}

func TestDeliverAfterClose(t *testing.T) {
	t.Parallel()
	tr, _ := serve(t, answer(204, ""), webhook.Config{})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := deliver(t, tr)
	if !errors.Is(err, webhook.ErrClosed) || !v.Retryable {
		t.Fatalf("Deliver after Close = %v (retryable %v)", err, v.Retryable)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestTooLargeForNowIsTheMessagesTransientFault: a 413 with a Retry-After
// says the body is too large for now (RFC 9110, 15.5.14). The message is
// tried again after it, charged; a 413 without one is still permanent.
func TestTooLargeForNowIsTheMessagesTransientFault(t *testing.T) {
	tr, _ := serve(t, answer(413, "over the quota until the hour", "Retry-After", "120"), webhook.Config{})
	v, _ := deliver(t, tr)
	wantVerdict(t, v, errorhandling.ClassTransient, errorhandling.BlameMessage, errorhandling.ReasonValidationFailure)
	if v.RetryAfter != 2*time.Minute || v.Code != "http_413" {
		t.Fatalf("RetryAfter %v, code %q; want 2m0s, http_413", v.RetryAfter, v.Code)
	}
	tr, _ = serve(t, answer(413, "too large"), webhook.Config{})
	v, _ = deliver(t, tr)
	wantVerdict(t, v, errorhandling.ClassPermanent, errorhandling.BlameMessage, errorhandling.ReasonValidationFailure)
}
