package admin

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// A long request's progress reports (102 Processing, written by a
// goroutine of their own) read the answer's header map to send it, while
// the handler sets its headers on the same map: a data race (found by
// make test's -race in TestLongBulkActionOutlastsTheClientsTimeout, the
// bulk action's writeJSON against a report). The handler now sets its
// headers on a map of its own, copied into the answer's when it starts
// the answer.
func TestProgressReportsDoNotRaceTheAnswersHeaders(t *testing.T) {
	s := &Server{cfg: Config{ProgressInterval: 50 * time.Microsecond}}
	h := s.reporting(func(w http.ResponseWriter, r *http.Request) {
		for i := range 20000 {
			w.Header().Set("X-Step", strconv.Itoa(i))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ProgressHeader, "1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Step") != "19999" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d, X-Step %q, Content-Type %q", resp.StatusCode, resp.Header.Get("X-Step"), resp.Header.Get("Content-Type"))
	}
}
