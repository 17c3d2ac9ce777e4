package rabbitmq

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestReturnedEndsOnAClosedChannel: a confirm followed by the channel's
// close (the broker closed the connection: rabbitmqctl
// close_all_connections) leaves the returns closed. returned read a
// closed channel for good, so Deliver never returned: under serve the
// worker was held, spinning at full CPU, and the message's lease renewed
// forever; a probe closing the connections every second hung all 8
// Delivers within seconds.
func TestReturnedEndsOnAClosedChannel(t *testing.T) {
	returns := make(chan amqp.Return, 4)
	returns <- amqp.Return{MessageId: "other"}
	returns <- amqp.Return{MessageId: "m1", ReplyCode: amqp.NoRoute}
	close(returns)
	pc := &pubChannel{returns: returns}
	type result struct {
		r  amqp.Return
		ok bool
	}
	done := make(chan result, 1)
	go func() {
		r, ok := returned(pc, "m1")
		done <- result{r, ok}
	}()
	select {
	case res := <-done:
		if !res.ok || res.r.ReplyCode != amqp.NoRoute {
			t.Errorf("returned = %+v, %v; want the return of m1 read before the close", res.r, res.ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("returned did not return on a closed returns channel")
	}

	empty := make(chan amqp.Return)
	close(empty)
	go func() {
		r, ok := returned(&pubChannel{returns: empty}, "m1")
		done <- result{r, ok}
	}()
	select {
	case res := <-done:
		if res.ok {
			t.Errorf("returned on a closed channel with no returns = %+v, true; want false", res.r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("returned did not return on a closed returns channel")
	}
}
