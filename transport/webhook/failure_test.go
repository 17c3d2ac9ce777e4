package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
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

func TestSuccessStatuses(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 299} {
		tr, _ := serve(t, answer(status, "ok"), webhook.Config{})
		if _, err := deliver(t, tr); err != nil {
			t.Errorf("%d: Deliver = %v, want nil", status, err)
		}
	}
}

func TestServiceUnavailableIsTransientDestination(t *testing.T) {
	tr, _ := serve(t, answer(503, "maintenance"), webhook.Config{})
	v, err := deliver(t, tr)
	wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
	if v.Code != "service_unavailable" {
		t.Errorf("Code = %q", v.Code)
	}
	var se *webhook.StatusError
	if !errors.As(err, &se) || se.StatusCode != 503 || se.Body != "maintenance" {
		t.Fatalf("StatusError = %+v", se)
	}
	if _, ok := errorhandling.RetryAfterOf(err); ok {
		t.Error("retry-after hint without a Retry-After header")
	}
}

func TestTransientStatuses(t *testing.T) {
	for _, status := range []int{408, 425, 429, 500, 502, 504} {
		tr, _ := serve(t, answer(status, ""), webhook.Config{})
		v, _ := deliver(t, tr)
		if v.Class != transient || v.Blame != dest || !v.Retryable {
			t.Errorf("%d: verdict %s/%s retryable=%v", status, v.Class, v.Blame, v.Retryable)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        time.Duration // 0: no hint
	}{
		{"seconds", "7", 7 * time.Second},
		{"http date", epoch.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"capped", "86400", webhook.MaxRetryAfter},
		{"capped date", epoch.Add(48 * time.Hour).Format(http.TimeFormat), webhook.MaxRetryAfter},
		{"past date", epoch.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"zero", "0", 0},
		{"negative", "-5", 0},
		{"garbage", "soon", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, _ := serve(t, answer(429, "slow down", "Retry-After", c.value), webhook.Config{})
			v, err := deliver(t, tr)
			wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
			got, ok := errorhandling.RetryAfterOf(err)
			if ok != (c.want != 0) || got != c.want || v.RetryAfter != c.want {
				t.Fatalf("RetryAfter = %v (%v), classified %v, want %v", got, ok, v.RetryAfter, c.want)
			}
		})
	}
}

func TestClientErrorsArePermanentMessageFaults(t *testing.T) {
	for _, status := range []int{400, 409, 413, 415, 422} {
		tr, _ := serve(t, answer(status, `{"error":"invalid order"}`), webhook.Config{})
		v, err := deliver(t, tr)
		wantVerdict(t, v, permanent, msg, errorhandling.ReasonValidationFailure)
		if !strings.Contains(err.Error(), "invalid order") {
			t.Errorf("%d: error %q lacks the body", status, err)
		}
	}
}

func TestErrorTextHasStatusAndTruncatedBody(t *testing.T) {
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

func TestRedirectIsTransientDestinationFault(t *testing.T) {
	tr, _ := serve(t, answer(301, "", "Location", "https://new.example.com/hooks?key=abc"), webhook.Config{})
	v, err := deliver(t, tr)
	wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
	if !errors.Is(err, webhook.ErrRedirect) {
		t.Fatalf("error %v does not match ErrRedirect", err)
	}
	if text := err.Error(); !strings.Contains(text, "https://new.example.com/hooks") || strings.Contains(text, "key=abc") {
		t.Fatalf("error %q: want the Location without its query", text)
	}
}

func TestConnectionRefusedIsTransientDestination(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	tr, err := webhook.New(webhook.Config{URL: "http://" + addr + "/hooks?token=s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	v, err := deliver(t, tr)
	wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
	if v.Code != "connection_refused" {
		t.Errorf("Code = %q (error %v)", v.Code, err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q leaks the URL's token", err)
	}
}

func TestDNSFailureIsTransientDestination(t *testing.T) {
	tr, err := webhook.New(webhook.Config{URL: "http://backstop-no-such-host.invalid/hooks"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	v, _ := deliver(t, tr)
	if v.Class != transient || v.Blame != dest {
		t.Fatalf("verdict %s/%s", v.Class, v.Blame)
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

func TestBadMessageHeaderIsPermanentMessageFault(t *testing.T) {
	tr, _ := serve(t, answer(204, ""), webhook.Config{})
	m := message()
	m.Headers = map[string]string{"X-Note": "line1\nline2"}
	err := tr.Deliver(context.Background(), m)
	wantVerdict(t, errorhandling.NewErrorClassifier().Classify(err), permanent, msg, errorhandling.ReasonValidationFailure)
}

func TestDeliverAfterClose(t *testing.T) {
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
