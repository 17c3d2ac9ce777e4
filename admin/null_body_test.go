package admin_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/dlq"
)

// A body of JSON null is not an object either: it decoded as an empty
// filter, so POST /v1/dlq/delete with null deleted every dead letter (and
// the messages they park), /replay replayed them all and /resolve resolved
// them all, where [], "x" or 42 get a 400.
func TestNullBodyIsNotAnEmptyFilter(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for i := range 3 {
		deadLettered(t, a, "billing", "s"+string(rune('a'+i)))
	}
	for _, path := range []string{"/v1/dlq/delete", "/v1/dlq/replay", "/v1/dlq/resolve", "/v1/messages", "/v1/dlq/recover", "/v1/dlq/purge"} {
		for _, body := range []string{`null`, ` null `} {
			status, resp := checkedSend(t, a, "POST", path, body)
			if status != 400 || !strings.Contains(resp, `"detail":"the request body must be a JSON object`) {
				t.Errorf("POST %s %q: %d %s, want 400 saying the body must be a JSON object", path, body, status, resp)
			}
		}
	}
	es, err := a.st.DLQ().List(a.ctx, &dlq.Filters{Status: dlq.StatusPending})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Errorf("%d pending dead letters after requests with a null body, want the 3 untouched", len(es))
	}
}
