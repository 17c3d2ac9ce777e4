package rabbitmq_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// memoryAlarm sets off the broker's memory alarm (a high watermark no
// broker is under) and waits until it is in effect; the returned func
// clears it (the default watermark, 0.4) and waits until it has cleared.
// The alarm is cleared when the test ends in any case. It blocks every
// publisher of the broker: keep it short. It skips the test when
// rabbitmqctl cannot be run here, and unless BACKSTOP_BROKER_ALARMS=1:
// other packages' tests publishing to the same broker beside it would
// stall for as long as it lasts (make test runs it alone, after them).
func memoryAlarm(t *testing.T) (clear func()) {
	t.Helper()
	if os.Getenv("BACKSTOP_BROKER_ALARMS") != "1" {
		t.Skip("sets off the broker's memory alarm, which stalls every other test publishing to it: " +
			"run with BACKSTOP_BROKER_ALARMS=1 when nothing else uses the broker (make test does, after the other packages)")
	}
	restore := func() { _ = exec.Command("rabbitmqctl", "set_vm_memory_high_watermark", "0.4").Run() }
	t.Cleanup(restore)
	ctl(t, "set_vm_memory_high_watermark", "0.0000001")
	waitAlarm(t, true)
	return func() {
		t.Helper()
		restore()
		waitAlarm(t, false)
	}
}

// waitAlarm waits until the broker reports its memory alarm on (or off),
// for at most 15 seconds.
func waitAlarm(t *testing.T, on bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command("rabbitmqctl", "-q", "eval", "rabbit_alarm:get_alarms().").Output()
		if err == nil && strings.Contains(string(out), "memory") == on {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker's memory alarm is not %v after 15 s: %s %v", map[bool]string{true: "on", false: "off"}[on], out, err)
		}
		time.Sleep(100 * time.Millisecond) // rabbitmqctl is another process
	}
}

// TestBrokerAlarmFailsDeliveriesAtOnceAndEnqueuesNoneOfThemLater: a
// memory alarm makes the broker block publishers. It tells a connection
// so (connection.blocked) once it publishes, and stops reading it. The
// transport ignored that: each Deliver waited the whole Timeout and failed
// as a timeout, the connection was dropped as silent, the next Deliver
// dialed another and was blocked in turn; and once the alarm cleared the
// broker read those connections and enqueued the messages Deliver had
// reported as failed, a copy per retry (four of five in a probe). Now the
// Deliver that met the block fails as soon as the broker says so, later
// ones fail at once without publishing, all as "blocked" (transient, the
// destination's), and the same connection publishes again once the
// broker unblocks it.
func TestBrokerAlarmFailsDeliveriesAtOnceAndEnqueuesNoneOfThemLater(t *testing.T) {
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	q := a.queue(ex, "#", nil)
	const timeout = 2 * time.Second
	tr := newTransport(t, rabbitmq.Config{Exchange: ex, Timeout: timeout})
	if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
		t.Fatalf("Deliver before the alarm: %v", err)
	}

	clear := memoryAlarm(t)
	for i := range 5 {
		start := time.Now()
		err := tr.Deliver(ctxFor(t), message(t))
		took := time.Since(start)
		wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "blocked")
		if took >= timeout/2 {
			t.Fatalf("Deliver #%d during the alarm took %v (Timeout %v)", i+1, took, timeout)
		}
	}
	clear()

	if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
		t.Fatalf("Deliver once the alarm cleared: %v", err)
	}
	// Confirmed on the connection the alarm blocked, after whatever the
	// broker read of it: the message the broker blocked the connection on
	// may have been enqueued, none of the later ones.
	qi, err := a.ch.QueueDeclarePassive(q, false, false, false, false, amqp.Table{})
	if err != nil {
		t.Fatal(err)
	}
	if qi.Messages > 3 {
		t.Fatalf("the queue holds %d messages; 2 were confirmed, and at most the one the broker blocked on may have been enqueued", qi.Messages)
	}
}
