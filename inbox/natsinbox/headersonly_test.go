package natsinbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestHeadersOnlyConsumerIsRefused runs the receiver on a consumer that
// delivers the headers of each message without its payload: every message
// was stored with an empty payload and acknowledged, its content gone.
// Run must refuse such a consumer, naming HeadersOnly.
func TestHeadersOnlyConsumerIsRefused(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 30*time.Second)
	in := e.NewInbox(e.Config())
	cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: "headers-only",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "HeadersOnly") {
		t.Errorf("Run = %v, want an error naming HeadersOnly", err)
	}
}
