// Command inbox runs two services that talk through NATS JetStream with
// Backstop on both ends: service A writes orders and their "order.placed"
// messages in one transaction and its relay publishes them to NATS;
// service B's inbox consumes them, drops what NATS delivers twice, and
// handles each message once: it writes a shipment row and an outgoing
// "shipment.requested" message in one transaction with the message's
// completion. B's own relay then delivers those to its warehouse. One
// handler attempt fails on purpose and is retried; one message has no
// handler and is dead-lettered with its reason.
//
// It needs a NATS server with JetStream (nats-server -js) at
// nats://127.0.0.1:4222, or at the address in BACKSTOP_NATS_URL.
//
//	go run ./examples/inbox
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/natsinbox"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

const orders = 5

func main() {
	url := os.Getenv("BACKSTOP_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if err := run(context.Background(), url, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "inbox example:", err)
		os.Exit(1)
	}
}

// errNoNATS says how to get the server the example needs.
var errNoNATS = errors.New("this example needs NATS with JetStream: start one with `nats-server -js` " +
	"(or `docker run -p 4222:4222 nats -js`), or set BACKSTOP_NATS_URL")

// run does the whole job; out gets the story, logs the operations log.
func run(ctx context.Context, url string, out, logs io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The operations log is left out (the dead letter is on purpose): the
	// summary says what happened.
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError + 4}))

	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return fmt.Errorf("NATS at %s is not reachable (%v): %w", url, err, errNoNATS)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	src, cleanup, err := newSource(ctx, js)
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errNoNATS)
	}
	defer cleanup()

	dir, err := os.MkdirTemp("", "backstop-inbox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	a, err := startServiceA(ctx, filepath.Join(dir, "a.db"), nc, src, logger)
	if err != nil {
		return err
	}
	b, err := startServiceB(ctx, filepath.Join(dir, "b.db"), src.consumer, logger)
	if err != nil {
		return err
	}
	if err := a.placeOrders(ctx, orders); err != nil {
		return err
	}
	done := waitUntil(ctx, func() bool {
		s := b.in.Relay().Stats()
		return s.Delivered == orders && s.DeadLettered == 1 && b.warehouse.Load() == orders
	})
	if done {
		// A publisher retrying after JetStream's duplicate window (100 ms
		// here, 2 min by default) stores a message twice: B's inbox
		// recognises it and drops it.
		if err := publishAgain(ctx, js, src); err != nil {
			return err
		}
		done = waitUntil(ctx, func() bool { return counter(b.metrics, "backstop_inbox_duplicates_total") == 1 })
	}
	a.stop()
	b.stop()
	defer a.st.Close()
	defer b.st.Close()
	if !done {
		return fmt.Errorf("gave up waiting: service B's inbox %+v", b.in.Relay().Stats())
	}
	return b.summarise(ctx, out, a)
}

// publishAgain publishes the first message of the stream again, with its
// Nats-Msg-Id, once JetStream no longer drops it as a duplicate.
func publishAgain(ctx context.Context, js jetstream.JetStream, src *source) error {
	s, err := js.Stream(ctx, src.stream)
	if err != nil {
		return err
	}
	first, err := s.GetMsg(ctx, 1)
	if err != nil {
		return err
	}
	m := nats.NewMsg(first.Subject)
	m.Header, m.Data = first.Header, first.Data
	var perr error
	stored := waitUntil(ctx, func() bool {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			perr = err
			return true
		}
		return !ack.Duplicate
	})
	if perr != nil {
		return perr
	}
	if !stored {
		return ctx.Err()
	}
	return nil
}

// counter reads a counter of reg, summed over its labels.
func counter(reg *prometheus.Registry, name string) int {
	fams, _ := reg.Gather()
	total := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int(total)
}

// source is the example's stream and service B's durable consumer.
type source struct {
	stream, subject string
	consumer        jetstream.Consumer
}

func newSource(ctx context.Context, js jetstream.JetStream) (*source, func(), error) {
	token := "inboxexample_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	s := &source{stream: strings.ToUpper(token), subject: token + ".{type}"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{token + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond}); err != nil {
		return nil, nil, fmt.Errorf("create stream: %w", err)
	}
	cleanup := func() { _ = js.DeleteStream(context.Background(), s.stream) }
	c, err := js.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{Durable: "service-b",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxAckPending: 1})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("create consumer: %w", err)
	}
	s.consumer = c
	return s, cleanup, nil
}

// background runs fn until stop is called.
func background(ctx context.Context, fns ...func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, len(fns))
	for _, fn := range fns {
		go func() {
			_ = fn(ctx)
			done <- struct{}{}
		}()
	}
	return func() {
		cancel()
		for range fns {
			<-done
		}
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// serviceA writes orders with their messages and relays them to NATS.
type serviceA struct {
	st    *sqlite.Store
	relay *relay.Relay
	stop  func()
}

func startServiceA(ctx context.Context, path string, nc *nats.Conn, src *source, logger *slog.Logger) (*serviceA, error) {
	st, err := sqlite.Open(ctx, path, store.Config{})
	if err != nil {
		return nil, err
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, item TEXT)`); err != nil {
		return nil, err
	}
	tr, err := natstransport.New(natstransport.Config{Conn: nc, Subject: src.subject, Stream: src.stream})
	if err != nil {
		return nil, err
	}
	r, err := relay.New(st, relay.Config{
		Destinations: map[string]relay.Destination{"order-events": {Transport: tr}},
		PollInterval: 20 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	stop := background(ctx, r.Run)
	return &serviceA{st: st, relay: r, stop: stop}, nil
}

// placeOrders writes each order and its message in one transaction. The
// last order is of a kind service B has no handler for.
func (a *serviceA) placeOrders(ctx context.Context, n int) error {
	for i := 1; i <= n+1; i++ {
		id := fmt.Sprintf("order-%d", i)
		typ := "order.placed"
		if i == n+1 {
			typ = "order.gift-wrapped"
		}
		tx, err := a.st.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, item) VALUES (?, ?)`, id, "book"); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		m := &outbox.Message{Destination: "order-events", Type: typ, Stream: id,
			Payload: fmt.Appendf(nil, `{"order":%q,"item":"book"}`, id)}
		if err := a.st.EnqueueTx(ctx, tx, m); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// serviceB receives order events into its inbox, and relays the messages
// its handler writes to its warehouse.
type serviceB struct {
	st        *sqlite.Store
	in        *inbox.Inbox
	relay     *relay.Relay
	warehouse atomic.Int64 // shipment requests the warehouse received
	failed    atomic.Bool  // the handler's one failure happened
	metrics   *prometheus.Registry
	stop      func()
}

func startServiceB(ctx context.Context, path string, consumer jetstream.Consumer, logger *slog.Logger) (*serviceB, error) {
	// The inbox's policy: retry after 200 ms (the example is short; the
	// default is 30 s doubling), at most 5 attempts, in order per stream.
	st, err := sqlite.Open(ctx, path, store.Config{Policies: map[string]store.Policy{
		inbox.Destination("orders"): {Strategy: retry.NewFixedDelay(200*time.Millisecond, false), MaxAttempts: 5},
	}})
	if err != nil {
		return nil, err
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE shipments (order_id TEXT PRIMARY KEY, item TEXT)`); err != nil {
		return nil, err
	}
	b := &serviceB{st: st, metrics: prometheus.NewRegistry()}
	in, err := inbox.New(st, inbox.Config{
		Name:     "orders",
		Relay:    relay.Config{PollInterval: 20 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond, Logger: logger},
		Handling: relay.Destination{InProcess: retry.NewConfig(1, nil)},
		// A type B has no handler for is dead-lettered at once: B runs
		// alone, no newer instance will come to handle it.
		NoHandlerWait: -1,
		Metrics:       b.metrics,
	})
	if err != nil {
		return nil, err
	}
	in.Handle("order.placed", b.orderPlaced)
	b.in = in
	rcv, err := natsinbox.New(natsinbox.Config{Inbox: in, Consumer: consumer, Logger: logger})
	if err != nil {
		return nil, err
	}
	// B's outbox relay shares the table with the inbox: it serves its own
	// destination and leaves the inbox's rows to the inbox.
	b.relay, err = relay.New(st, relay.Config{
		Destinations: map[string]relay.Destination{"warehouse": {Transport: transport.Func(
			func(context.Context, *outbox.Message) error { b.warehouse.Add(1); return nil })}},
		UnknownDestination: relay.IgnoreUnknown,
		// The store's policy for the inbox is the inbox's business.
		AllowForeignPolicies: true,
		PollInterval:         20 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	stop := background(ctx, rcv.Run, in.Run, b.relay.Run)
	b.stop = stop
	return b, nil
}

// orderPlaced is B's handler: the shipment row, the warehouse message and
// the inbox message's completion commit together. Its first attempt for
// order-2 fails, as if the database were busy; the inbox tries again.
func (b *serviceB) orderPlaced(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
	if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id, item) VALUES (?, 'book')`, msg.Stream); err != nil {
		return err
	}
	if msg.Stream == "order-2" && b.failed.CompareAndSwap(false, true) {
		return errors.New("warehouse schedule locked, try again")
	}
	return tx.Enqueue(ctx, &outbox.Message{Destination: "warehouse", Type: "shipment.requested", Stream: msg.Stream,
		Payload: msg.Payload})
}

func (b *serviceB) summarise(ctx context.Context, out io.Writer, a *serviceA) error {
	var shipments int
	if err := b.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM shipments`).Scan(&shipments); err != nil {
		return err
	}
	entries, err := b.st.DLQ().List(ctx, nil)
	if err != nil {
		return err
	}
	as, is := a.relay.Stats(), b.in.Relay().Stats()
	fmt.Fprintln(out, "Backstop inbox example: service A -> NATS JetStream -> service B")
	fmt.Fprintf(out, "  service A  wrote %d orders with their messages; its relay published %d to NATS\n", orders+1, as.Delivered)
	fmt.Fprintf(out, "  service B  inbox received %d, dropped %d redelivered duplicate(s)\n",
		counter(b.metrics, "backstop_inbox_received_total"), counter(b.metrics, "backstop_inbox_duplicates_total"))
	fmt.Fprintf(out, "             handled %d, retried %d failed attempt(s), dead-lettered %d\n",
		is.Delivered, is.Failed-is.DeadLettered, is.DeadLettered)
	fmt.Fprintf(out, "             wrote %d shipments, each with its warehouse message in the same transaction\n", shipments)
	fmt.Fprintf(out, "             its relay delivered %d shipment requests to the warehouse\n", b.warehouse.Load())
	for _, e := range entries {
		fmt.Fprintf(out, "  dead letter %s %s: %s (%s)\n", e.Stream, e.Type, e.ErrorMessage, e.FailureReason)
	}
	if shipments != orders || len(entries) != 1 || b.warehouse.Load() != orders {
		return fmt.Errorf("%d shipments, %d dead letters, %d warehouse messages; want %d, 1, %d",
			shipments, len(entries), b.warehouse.Load(), orders, orders)
	}
	return nil
}
