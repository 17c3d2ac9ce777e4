package tracker_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/tracker"
)

// start is where the examples' fake clock begins.
var start = time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)

func since(tok tracker.RetryToken) string {
	if tok.Never() {
		return "never"
	}
	return "+" + tok.Deadline().Sub(start).String()
}

func ExampleTracker() {
	c := clock.NewFake(start)
	t := tracker.New(tracker.Config{
		Name:   "webhook",
		Clock:  c,
		Logger: slog.New(slog.DiscardHandler),
		// Strategy nil: 1s, 2s, 4s, ... capped at 5m.
	})

	try := func() {
		if _, ok := t.TryProceed(); !ok {
			fmt.Println("backing off")
			return
		}
		tok := t.Fault() // the delivery failed
		fmt.Println("fault", t.Faults(), "retry at", since(tok))
	}
	try()
	try()
	c.Advance(time.Second)
	try()

	tok, _ := t.TryProceed()
	fmt.Println("wait", tok.Remaining())
	c.Advance(tok.Remaining())
	if _, ok := t.TryProceed(); ok {
		t.Success() // the delivery worked
	}
	fmt.Println("healthy:", t.Healthy())
	// Output:
	// fault 1 retry at +1s
	// backing off
	// fault 2 retry at +3s
	// wait 2s
	// healthy: true
}

func ExampleRetryToken_And() {
	c := clock.NewFake(start)
	service := tracker.NewRetryToken(c, start.Add(30*time.Second))
	param := tracker.NewRetryToken(c, start.Add(10*time.Second))
	other := tracker.NewRetryToken(c, start.Add(20*time.Second))

	// This message may go once both its destination and the message itself
	// are past their back-off; or, if another destination can take it, when
	// that one is.
	here := service.And(param)
	either := here.Or(other)
	fmt.Println("here:", since(here), "either:", since(either))

	// A stopped destination never releases an AND, and never holds an OR.
	stopped := tracker.Never(c)
	fmt.Println("stopped AND param:", since(stopped.And(param)), "stopped OR param:", since(stopped.Or(param)))

	done := make(chan error)
	go func() { done <- either.Wait(context.Background()) }()
	c.WaitForTimers(1, nil) // the waiter is now waiting
	c.Advance(20 * time.Second)
	fmt.Println("waited:", <-done, "expired:", either.Expired(), here.Expired())
	// Output:
	// here: +30s either: +20s
	// stopped AND param: never stopped OR param: +10s
	// waited: <nil> expired: true false
}

func ExampleBlamer() {
	c := clock.NewFake(start)
	cfg := tracker.Config{Clock: c, Logger: slog.New(slog.DiscardHandler)}
	b := tracker.NewBlamer(
		tracker.NewRegistry(tracker.RegistryConfig{Config: cfg, MaxEntries: 100}),
		tracker.NewRegistry(tracker.RegistryConfig{Config: cfg, MaxEntries: 10000}),
	)
	classify := errorhandling.NewErrorClassifier().Classify

	// A message the destination rejects as invalid: the message is blamed.
	invalid := errorhandling.Transient(errorhandling.WithBlame(fmt.Errorf("bad payload"), errorhandling.BlameMessage))
	tok := b.Record("orders-webhook", "msg-1", classify(invalid))
	fmt.Println("msg-1 retry at", since(tok), "destination healthy:", b.Service("orders-webhook").Healthy())

	_, ok := b.TryProceed("orders-webhook", "msg-2")
	fmt.Println("msg-2 may go:", ok)

	// The destination times out: the destination is blamed, every message waits.
	timeout := errorhandling.Transient(errorhandling.WithBlame(fmt.Errorf("timeout"), errorhandling.BlameDestination))
	b.Record("orders-webhook", "msg-2", classify(timeout))
	tok, ok = b.TryProceed("orders-webhook", "msg-3")
	fmt.Println("msg-3 may go:", ok, "at", since(tok))

	c.Advance(time.Second)
	b.Succeed("orders-webhook", "msg-2")
	_, ok = b.TryProceed("orders-webhook", "msg-1")
	fmt.Println("msg-1 may go:", ok, "destination healthy:", b.Service("orders-webhook").Healthy())
	// Output:
	// msg-1 retry at +1s destination healthy: true
	// msg-2 may go: true
	// msg-3 may go: false at +1s
	// msg-1 may go: true destination healthy: true
}
