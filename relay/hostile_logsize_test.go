package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

// A handler's 10 MB error text (a response body, a dump) is stored cut to
// outbox.MaxErrorLength; the operations log must not carry it whole on
// every attempt, nor its invalid UTF-8 and NULs.
func TestHugeErrorIsCutInTheLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	transient, permanent := msg("api", "a", 1), msg("api", "b", 2)
	e.enqueue(transient, permanent)
	huge := strings.Repeat("x\x00\xff", 10<<20/3)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if m.ID == transient.ID {
			return errorhandling.WithBlame(errorhandling.Transient(errors.New(huge)), errorhandling.BlameMessage)
		}
		return errorhandling.Permanent(errors.New(huge))
	}}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(2, retry.NewFixedDelay(0, false)),
	}}))
	rn.settle()
	if e.get(permanent.ID) == nil || e.get(permanent.ID).DeadLetteredAt.IsZero() {
		t.Fatal("the permanent failure was not dead-lettered")
	}
	e.logs.mu.Lock()
	defer e.logs.mu.Unlock()
	n := 0
	for _, r := range e.logs.recs {
		if s, ok := r.attrs["error"]; ok {
			n++
			if utf8.RuneCountInString(s) > outbox.MaxErrorLength || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
				t.Errorf("log record %q carries an error of %d bytes (NUL %v, valid UTF-8 %v)", r.msg, len(s), strings.ContainsRune(s, 0), utf8.ValidString(s))
			}
		}
	}
	if n == 0 {
		t.Fatal("no log record with an error")
	}
}
