package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestNATSCongestedStreamChargesNothing: a work-queue stream at its
// MaxMsgs with a discard-new policy, whose consumer takes a message now
// and then (slower than they come), refuses most publishes, and takes one
// after each message its consumer took. Every message waits its turn:
// none is singled out, charged an attempt or dead-lettered.
func TestNATSCongestedStreamChargesNothing(t *testing.T) {
	e := longEnv(t, withOrdering(outbox.OrderingNone))
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unreachable(t, "NATS at "+testenv.NATSURL(), testenv.NATSEnv, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "bt_relay_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	st, err := js.CreateStream(e.ctx, jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage, Retention: jetstream.WorkQueuePolicy, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(t.Context(), strings.ToUpper(prefix)) })
	tr, err := natstransport.New(natstransport.Config{URL: testenv.NATSURL(), Subject: prefix + ".{type}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	rn := e.start(e.config(map[string]Destination{"nats": {Transport: tr, SingledOutAfter: singledOutAfter}}))

	var ids []uuid.UUID
	// Two messages come a minute, the consumer takes one, for half an
	// hour.
	for i := range 30 {
		for j := range 2 {
			m := msg("nats", "", 2*i+j)
			ids = append(ids, m.ID)
			e.enqueue(m)
		}
		for range 2 {
			rn.advance(30 * time.Second)
		}
		// The consumer: the stream's first message taken off.
		info, err := st.Info(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs > 0 {
			if err := st.DeleteMsg(e.ctx, info.State.FirstSeq); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		if got := e.get(id); got != nil && (got.Attempts != 0 || !got.DeadLetteredAt.IsZero()) {
			t.Fatalf("a message of a congested stream was charged: %+v (last error %q)", got, got.Error)
		}
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters of a congested stream: %d, the first: %q", len(dl), dl[0].ErrorMessage)
	}
}
