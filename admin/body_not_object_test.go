package admin_test

import (
	"strings"
	"testing"
)

// A body that is JSON but not an object says so: the answer's detail was
// " must be a JSON object", a sentence without its subject (the type
// error of the whole body names no field).
func TestBodyThatIsNotAnObjectSaysSo(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, body := range []string{`[]`, `"x"`, `42`, `true`} {
		status, resp := checkedSend(t, a, "POST", "/v1/messages", body)
		if status != 400 || !strings.Contains(resp, `"detail":"the request body must be a JSON object`) {
			t.Errorf("%s: %d %s, want 400 saying the body must be a JSON object", body, status, resp)
		}
	}
}
