package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// Example receives an order twice, as a source redelivering it would, and
// handles it once: the shipment row, the outgoing message and the inbox
// completion commit together.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), store.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_, _ = st.DB().ExecContext(ctx, `CREATE TABLE shipments (order_id TEXT PRIMARY KEY)`)

	in, err := inbox.New(st, inbox.Config{Name: "orders", Relay: relay.Config{PollInterval: 20 * time.Millisecond}})
	if err != nil {
		fmt.Println(err)
		return
	}
	handled := make(chan string, 1)
	in.Handle("order.placed", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, msg.Stream); err != nil {
			return err
		}
		if err := tx.Enqueue(ctx, &outbox.Message{Destination: "warehouse", Type: "shipment.requested"}); err != nil {
			return err
		}
		handled <- msg.ID
		return nil
	})

	for range 2 {
		dup, err := in.Receive(ctx, inbox.Received{ID: "msg-1", Type: "order.placed", Stream: "order-1", Payload: []byte(`{}`)})
		fmt.Println("duplicate:", dup, err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(runCtx) }()
	fmt.Println("handled:", <-handled)
	stop()
	<-done

	var shipments int
	_ = st.DB().QueryRowContext(ctx, `SELECT count(*) FROM shipments`).Scan(&shipments)
	fmt.Println("shipments:", shipments)
	// Output:
	// duplicate: false <nil>
	// duplicate: true <nil>
	// handled: msg-1
	// shipments: 1
}
