package rabbitmq_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// TestExchangeDeletedWhilePublishing: an operator deletes the exchange
// while messages are being published (the broker closes each channel that
// publishes to it, 404), then declares it again, first without its
// binding (every message unroutable), then with it. Every Deliver returns
// within the Timeout, each failure is the destination's transient fault,
// no message is confirmed while it cannot reach the queue, and every
// message is in the queue at the end.
func TestExchangeDeletedWhilePublishing(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	queue := a.queue(ex, "#", nil)
	rec, _ := a.readBack(queue)
	tr := newTransport(t, rabbitmq.Config{Exchange: ex, Timeout: 2 * time.Second})
	ctx := ctxFor(t)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		codes  = map[string]int{}
		sent   []string
		faults = make(chan string, 1)
		stop   atomic.Bool
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m := message(t)
				for {
					start := time.Now()
					err := tr.Deliver(ctx, m)
					if took := time.Since(start); took > 5*time.Second {
						t.Errorf("Deliver took %v", took)
					}
					if err == nil {
						break
					}
					v := errorhandling.NewErrorClassifier().Classify(err)
					if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination {
						t.Errorf("Deliver: %v classified %v, %v; want a transient fault of the destination", err, v.Class, v.Blame)
						return
					}
					mu.Lock()
					codes[v.Code]++
					mu.Unlock()
					select {
					case faults <- v.Code:
					default:
					}
					if ctx.Err() != nil {
						return
					}
				}
				mu.Lock()
				sent = append(sent, m.ID.String())
				mu.Unlock()
			}
		}()
	}
	await := func(code string) {
		t.Helper()
		for {
			select {
			case c := <-faults:
				if c == code {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no Deliver failed with %s", code)
			}
		}
	}
	for range 2 {
		if err := a.ch.ExchangeDelete(ex, false, false); err != nil {
			t.Fatal(err)
		}
		await("not_found")
		if err := a.ch.ExchangeDeclare(ex, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		await("unroutable")
		if err := a.ch.QueueBind(queue, "#", ex, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("faults: %v; %d messages confirmed", codes, len(sent))
	got, err := rec.Received(ctx, len(sent))
	if err != nil {
		t.Fatalf("%d of the %d confirmed messages in the queue: %v", rec.Len(), len(sent), err)
	}
	in := map[string]bool{}
	for _, d := range got {
		in[d.ID] = true
	}
	for _, id := range sent {
		if !in[id] {
			t.Fatalf("confirmed message %s not in the queue", id)
		}
	}
}
