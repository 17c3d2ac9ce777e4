package rabbitmq_test

import (
	"testing"

	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/rabbitmq"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestConformance runs the transport suite against a real RabbitMQ: each
// subtest gets its own exchange and a queue bound to it, read back by one
// consumer.
func TestConformance(t *testing.T) {
	connect(t)
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
			a := connect(t)
			ex := a.exchange(unique("bt.ex"))
			rec, _ := a.readBack(a.queue(ex, "#", nil))
			tr, err := rabbitmq.New(rabbitmq.Config{
				URL:        amqpURL(),
				Exchange:   ex,
				RoutingKey: "{destination}.{type}",
				Channels:   3, // fewer than the suite's concurrency: Deliver waits for a channel
			})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return tr, rec
		},
		Features: transporttest.Features{Headers: true, Ordered: true, ValidatesMessages: true},
		// CC as a string makes the broker refuse the publish, and x-delay
		// and x-death would steer it, if they got through.
		ReservedHeaders: []string{"CC", "BCC", "x-delay", "x-death", "X-Dead-Letter-Exchange"},
	})
}
