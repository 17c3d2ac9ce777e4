// Command quickstart runs Backstop's main job on this machine with no
// set-up: an embedded SQLite outbox written in the same transactions as the
// application's orders, a relay delivering it to a local webhook that fails
// on purpose, retries with back-off for what is transient, a dead letter
// for what never succeeds, and a summary at the end.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport/webhook"
)

const (
	streams         = 3
	stepsPerStream  = 8
	destinationName = "fulfilment"
)

var secret = []byte("whsec_cXVpY2tzdGFydC1zaWduaW5nLWtleSEh") // a Standard Webhooks secret: whsec_ + base64 of the key

func main() {
	if err := run(context.Background(), os.Stdout, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run does the whole job; out gets the summary, logs the operations log.
func run(ctx context.Context, out, logs io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "backstop-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Quick schedules so the demo takes seconds; production uses the
	// defaults (retry.RelayBackoff: 30 s doubling, capped at 1 h).
	fast := retry.NewExponentialBackoff(50*time.Millisecond, 400*time.Millisecond, true)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), store.Config{
		DefaultPolicy: store.Policy{Strategy: fast, MaxAttempts: 5, Ordering: outbox.OrderingStrict},
	})
	if err != nil {
		return err
	}
	defer st.Close()

	hook := newFlakyWebhook(secret)
	defer hook.Close()
	plan(hook)

	if err := placeOrders(ctx, st.DB(), st); err != nil {
		return err
	}

	tr, err := webhook.New(webhook.Config{URL: hook.URL(), Secret: secret, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := relay.New(st, relay.Config{
		Destinations: map[string]relay.Destination{destinationName: {
			Transport: tr,
			InProcess: retry.NewConfig(2, retry.NewFixedDelay(20*time.Millisecond, false)),
			Breaker:   &circuitbreaker.Config{MaxFailures: 10, Timeout: 300 * time.Millisecond},
		}},
		Workers:         4,
		PollInterval:    50 * time.Millisecond,
		MaxPollInterval: 200 * time.Millisecond,
		Tracker:         tracker.RegistryConfig{Config: tracker.Config{Strategy: fast}},
		Logger:          logger,
	})
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() { result <- r.Run(runCtx) }()
	total := streams * stepsPerStream
	finished := waitUntil(ctx, func() bool {
		s := r.Stats()
		return s.Delivered+s.DeadLettered >= int64(total)
	})
	stop()
	if err := <-result; err != nil {
		return err
	}
	if !finished {
		return fmt.Errorf("gave up waiting: %+v", r.Stats())
	}
	return summarise(ctx, out, st, r, hook, total)
}

// plan scripts the webhook's failures: a few transient 503s that later
// succeed, and one request it always rejects.
func plan(h *flakyWebhook) {
	h.failFirst("order-1", 3, 2) // two 503s, then accepted
	h.failFirst("order-2", 5, 1) // one 503
	h.failFirst("order-3", 2, 3) // three 503s
	h.reject("order-2", stepsPerStream)
}

// placeOrders writes each order's rows and its messages in one transaction
// per order: the messages exist if and only if the orders do.
func placeOrders(ctx context.Context, db *sql.DB, st *sqlite.Store) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT, step INTEGER)`); err != nil {
		return err
	}
	for o := 1; o <= streams; o++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("order-%d", o)
		var msgs []*outbox.Message
		for step := 1; step <= stepsPerStream; step++ {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, step) VALUES (?, ?)`, id, step); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			msgs = append(msgs, &outbox.Message{
				Destination: destinationName, Stream: id, Type: "order.step",
				Payload: fmt.Appendf(nil, `{"order":%q,"step":%d}`, id, step),
			})
		}
		if err := st.EnqueueTx(ctx, tx, msgs...); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// waitUntil polls done until it holds or ctx ends.
func waitUntil(ctx context.Context, done func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

func summarise(ctx context.Context, out io.Writer, st *sqlite.Store, r *relay.Relay, hook *flakyWebhook, total int) error {
	entries, err := st.DLQ().List(ctx, nil)
	if err != nil {
		return err
	}
	stats := r.Stats()
	dest := stats.Destinations[destinationName]
	delivered, violations := hook.check()
	fmt.Fprintln(out, "Backstop quickstart: summary")
	fmt.Fprintf(out, "  messages          %d on %d streams, written with their orders in SQLite\n", total, streams)
	fmt.Fprintf(out, "  delivered         %d (webhook accepted %d, signatures verified)\n", stats.Delivered, delivered)
	fmt.Fprintf(out, "  requests          %d (%d answered 503, %d answered 400)\n", hook.requests(), hook.unavailable(), hook.rejected())
	fmt.Fprintf(out, "  retried           %d in-process, %d released for later (no attempt charged)\n", stats.Retries, stats.Released)
	fmt.Fprintf(out, "  dead-lettered     %d\n", len(entries))
	for _, e := range entries {
		var body struct{ Step int }
		_ = json.Unmarshal(e.Payload, &body)
		fmt.Fprintf(out, "    %s step %d  reason=%s attempts=%d error=%q\n", e.Stream, body.Step, e.FailureReason, e.Attempts, e.ErrorMessage)
	}
	fmt.Fprintf(out, "  order violations  %d\n", violations)
	fmt.Fprintf(out, "  breaker           %s (opened %d times)\n", dest.Breaker, dest.BreakerTrips)
	if int(stats.Delivered)+len(entries) != total || delivered != int(stats.Delivered) {
		return fmt.Errorf("lost or duplicated messages: %d delivered (%d seen), %d dead-lettered, %d written", stats.Delivered, delivered, len(entries), total)
	}
	if violations != 0 {
		return fmt.Errorf("%d order violations", violations)
	}
	return nil
}
