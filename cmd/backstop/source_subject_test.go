package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestServeNamesTheSourceSubjectTheServerRefuses: a NATS source's filter
// subject that its stream does not capture stops serve at its start, as
// the docs promise of what the server refuses, and the error names the
// key (it said "consumer backstop on stream S: ... filter subject is not a
// valid subset", naming the consumer and the stream, not subject).
func TestServeNamesTheSourceSubjectTheServerRefuses(t *testing.T) {
	_, stream, _ := natsSource(t) // skips without NATS
	hook := newHookRecorder(t)
	c, err := config.Parse(fmt.Appendf(nil, `listen: 127.0.0.1:0
db: 'sqlite:%s'
destinations:
  - {name: partner-hook, type: webhook, url: '%s'}
sources:
  - inbox: orders
    type: nats
    url: %s
    stream: %s
    consumer: backstop
    subject: not_captured.orders
    forward: {to: [partner-hook]}
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, testenv.NATSURL(), stream),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = serve(t.Context(), c, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "sources[0] (inbox orders): subject: ") {
		t.Fatalf("serve = %v, want an error naming sources[0]'s subject", err)
	}
}
