package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// A relay delivering the messages of a SQLite outbox to a Go handler, in
// stream order.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "backstop-example")
	defer os.RemoveAll(dir)
	s, err := sqlite.Open(ctx, filepath.Join(dir, "outbox.db"), store.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// The application writes messages (here outside a transaction).
	for _, step := range []string{"created", "paid", "shipped"} {
		if err := s.Enqueue(ctx, &outbox.Message{
			Destination: "orders", Stream: "order-42", Type: "order." + step, Payload: []byte(step),
		}); err != nil {
			panic(err)
		}
	}

	done := make(chan struct{})
	delivered := 0
	r, err := relay.New(s, relay.Config{
		Destinations: map[string]relay.Destination{
			"orders": {Transport: transport.Func(func(ctx context.Context, m *outbox.Message) error {
				fmt.Printf("%s %s\n", m.Stream, m.Payload)
				if delivered++; delivered == 3 {
					close(done)
				}
				return nil
			})},
		},
		Workers: 1,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	result := make(chan error)
	go func() { result <- r.Run(runCtx) }()
	<-done
	stop() // graceful: records the last outcomes before Run returns
	if err := <-result; err != nil {
		panic(err)
	}
	fmt.Println("delivered:", r.Stats().Delivered)
	// Output:
	// order-42 created
	// order-42 paid
	// order-42 shipped
	// delivered: 3
}

// A handler of two steps reports the first as done when the second fails,
// so that the next attempt skips it.
func ExampleCompleted() {
	storeEvent := func(m *outbox.Message) error { return nil }
	publish := func(m *outbox.Message) error { return fmt.Errorf("broker unavailable") }
	handler := func(ctx context.Context, m *outbox.Message) error {
		if !m.Status.Has(outbox.StatusEventStored) {
			if err := storeEvent(m); err != nil {
				return err
			}
		}
		if err := publish(m); err != nil {
			return relay.Completed(err, outbox.StatusEventStored)
		}
		return nil
	}
	err := handler(context.Background(), &outbox.Message{})
	fmt.Println(err, relay.CompletedSteps(err))
	// Output: broker unavailable EventStored
}
