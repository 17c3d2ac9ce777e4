package natstransport_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestConformance runs the transport suite against a real JetStream: each
// subtest gets its own stream, read back through an ordered consumer.
func TestConformance(t *testing.T) {
	_, js := connect(t)
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
			s, prefix := newStream(t, js, jetstream.StreamConfig{})
			rec := readBack(t, s)
			tr, err := natstransport.New(natstransport.Config{
				URL:     natsURL(),
				Subject: prefix + ".{destination}.{type}",
				Stream:  s.CachedInfo().Config.Name,
			})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return tr, rec
		},
		Features: transporttest.Features{Dedup: true, Headers: true, Ordered: true, ValidatesMessages: true},
		// Each would make JetStream refuse or alter the publish if it
		// got through.
		ReservedHeaders: []string{"Nats-Msg-Id", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Msg-Id", "nats-rollup", "Nats-TTL"},
	})
}
