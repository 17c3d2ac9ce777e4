// Command workflow runs an order-fulfilment DAG on an embedded SQLite
// database in a temporary directory and prints the run's explanation: a
// payment call that fails twice and is retried, a shipping task that fails
// for good and is dead-lettered, the task that depended on it skipped, an
// independent branch that goes on. Then it fixes the cause, replays the
// dead letter, and prints the repaired run. The messages the tasks enqueue
// are written to the outbox in the transaction that records each success.
//
//	go run ./examples/workflow
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "workflow example:", err)
		os.Exit(1)
	}
}

// run does the whole example, printing to out; the engine's operations log
// (WARN and above) goes to logs.
func run(ctx context.Context, out, logs io.Writer) error {
	dir, err := os.MkdirTemp("", "backstop-workflow")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "backstop.db"), store.Config{})
	if err != nil {
		return err
	}
	defer st.Close()
	ws, err := wfsqlite.New(ctx, st)
	if err != nil {
		return err
	}
	engine, err := workflow.NewEngine(ws, workflow.Config{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	var addressFixed atomic.Bool
	dag, err := fulfilment(&addressFixed)
	if err != nil {
		return err
	}
	if err := engine.Register(dag); err != nil {
		return err
	}

	fmt.Fprintln(out, "== first run ==")
	r, err := engine.Run(ctx, "fulfilment", workflow.RunOptions{ID: "order-1001", Input: order{ID: 1001, Items: 3}})
	if err != nil && !errors.Is(err, workflow.ErrRunFailed) {
		return err
	}
	fmt.Fprint(out, r.Explain())

	fmt.Fprintln(out, "\n== the address is corrected; the dead letter is replayed ==")
	addressFixed.Store(true)
	r, err = engine.ReplayTask(ctx, r.Task("ship").DeadLetterID)
	if err != nil {
		return err
	}
	fmt.Fprint(out, r.Explain())

	var messages int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM backstop_outbox`).Scan(&messages); err != nil {
		return err
	}
	fmt.Fprintf(out, "\noutbox: %d messages, one per task that succeeded, written with its success\n", messages)
	return nil
}

type order struct{ ID, Items int }

// fulfilment is reserve -> charge -> ship -> notify, with analytics on its
// own. charge is flaky; ship fails until the address is fixed.
func fulfilment(addressFixed *atomic.Bool) (*workflow.DAG, error) {
	var chargeCalls atomic.Int32
	step := func(id string, fn func(ctx context.Context, tc *workflow.TaskContext) error) workflow.TaskFunc {
		return func(ctx context.Context, tc *workflow.TaskContext) error {
			if fn != nil {
				if err := fn(ctx, tc); err != nil {
					return err
				}
			}
			var o order
			if err := tc.Input(&o); err != nil {
				return err
			}
			return tc.Enqueue(&outbox.Message{Destination: "events", Stream: fmt.Sprintf("order-%d", o.ID),
				Type: "order." + id, Payload: fmt.Appendf(nil, `{"order":%d}`, o.ID)})
		}
	}
	charge := workflow.Task{ID: "charge", Upstream: []string{"reserve"}, Retries: 3,
		Strategy: retry.NewFixedDelay(20*time.Millisecond, false),
		Run: step("charged", func(context.Context, *workflow.TaskContext) error {
			if chargeCalls.Add(1) <= 2 {
				return errorhandling.WithCode(errors.New("payment gateway: 503 Service Unavailable"), "service_unavailable")
			}
			return nil
		})}
	ship := workflow.Task{ID: "ship", Upstream: []string{"charge"}, Critical: true,
		Run: step("shipped", func(context.Context, *workflow.TaskContext) error {
			if !addressFixed.Load() {
				return errorhandling.Permanent(errors.New("carrier: postcode 9999 does not exist"))
			}
			return nil
		})}
	return workflow.NewDAG("fulfilment", &errorhandling.PropagationConfig{
		Policy:              errorhandling.PropagationPolicyAllowPartial,
		AllowPartialSuccess: true,
	},
		workflow.Task{ID: "reserve", Run: step("reserved", nil)},
		charge,
		ship,
		workflow.Task{ID: "notify", Upstream: []string{"ship"}, Run: step("notified", nil)},
		workflow.Task{ID: "analytics", Upstream: []string{"reserve"}, Run: step("recorded", nil)},
	)
}
