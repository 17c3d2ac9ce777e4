package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
)

// TestClientSaysAnAnswerIsTooLarge: a page of dead letters larger than the
// 64 MiB the client reads (50 entries with binary payloads of 1 MiB, sent
// in base64, are 70 MB: backstop -o json dlq list at its default limit)
// failed as "answered 200, not JSON (application/json, 67108864 bytes):
// {"items":[{"id":... unexpected end of JSON input", as if the server
// had sent something broken. It now says the answer is too large and to
// ask for fewer items.
func TestClientSaysAnAnswerIsTooLarge(t *testing.T) {
	item := `{"id":"e","payload_base64":"` + strings.Repeat("/v7+", 1<<18) + `"},`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":[`))
		for range 65 { // 65 MiB of items
			_, _ = w.Write([]byte(item))
		}
		_, _ = w.Write([]byte(`{"id":"last"}]}`))
	}))
	t.Cleanup(srv.Close)
	_, err := (&admin.Client{BaseURL: srv.URL}).DeadLetters(context.Background(), nil)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "not JSON") || !strings.Contains(msg, "64 MiB") || !strings.Contains(msg, "fewer items") {
		t.Errorf("error %.400q does not say the answer was too large and to ask for fewer items", msg)
	}
	if len(msg) > 1000 {
		t.Errorf("error of %d bytes", len(msg))
	}
}
