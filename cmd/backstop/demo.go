package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport/webhook"
)

// demoOptions are the demo's settings.
type demoOptions struct {
	exit    bool          // end after the summary instead of serving
	listen  string        // the admin API's address
	streams int           // per destination
	steps   int           // messages per stream
	outage  time.Duration // how long billing answers 503 to everything, at least until its breaker opens
	live    bool          // redraw one progress line (a terminal)
	logs    io.Writer     // the relay's operations log; nil discards it
	timeout time.Duration // gives up delivering after this; 0 means demoTimeout
	// ready, when set, receives the admin URL and token once serving.
	ready func(url, token string)
}

// defaultDemoListen is where the demo serves the admin API.
const defaultDemoListen = "127.0.0.1:8080"

// The demo's destinations; billing has the outage.
var demoDestinations = []string{"orders", "billing"}

var demoSecret = []byte("whsec_ZGVtby1zaWduaW5nLWtleS1mb3ItYmFja3N0b3A=")

func newDemoCmd() *cobra.Command {
	o := demoOptions{}
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run Backstop on this machine with no set-up: SQLite, a failing local webhook, a summary, the admin API",
		Long: `demo writes a few thousand messages on many streams into an embedded SQLite
outbox in a temporary directory and delivers them to a local webhook that
fails the way real ones do: short blips, an outage long enough to open the
breaker, a 429 with Retry-After, and a few messages it always refuses.
It shows the progress, a closing table, then serves the admin API on the
demo's data until Ctrl-C (--exit ends at once).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.live = isTerminal(cmd.OutOrStdout())
			if verbose {
				o.logs = cmd.ErrOrStderr()
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.exit, "exit", false, "end after the summary instead of serving the admin API")
	f.StringVar(&o.listen, "listen", defaultDemoListen, "the admin API's address (when 8080 is taken: any free port)")
	f.IntVar(&o.streams, "streams", 30, "streams per destination (2 destinations)")
	f.IntVar(&o.steps, "steps", 50, "messages per stream")
	f.DurationVar(&o.outage, "outage", 2500*time.Millisecond, "how long the billing endpoint is down (longer, if its breaker has not opened by then)")
	f.BoolVarP(&verbose, "verbose", "v", false, "print the relay's operations log (WARN and ERROR) on stderr")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// demoRun is one run's state.
type demoRun struct {
	o     demoOptions
	st    *sqlite.Store
	hook  *demoHook
	relay *relay.Relay
	reg   *prometheus.Registry
	total int
	held  int // messages that stay behind a dead letter (strict order)
	start time.Time
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	if o.streams < 1 || o.steps < 1 {
		return errors.New("--streams and --steps must be at least 1")
	}
	dir, err := os.MkdirTemp("", "backstop-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Quick schedules so that the demo takes seconds; the defaults are
	// 30 s doubling up to 1 h for retries and 60 s for an open breaker.
	fast := retry.NewExponentialBackoff(100*time.Millisecond, time.Second, true)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "backstop.db"), store.Config{
		DefaultPolicy: store.Policy{Strategy: fast, MaxAttempts: 5, Ordering: outbox.OrderingStrict},
	})
	if err != nil {
		return err
	}
	defer st.Close()

	d := &demoRun{o: o, st: st, reg: prometheus.NewRegistry(), total: len(demoDestinations) * o.streams * o.steps}
	d.hook = newDemoHook(demoSecret, d.plan())
	defer d.hook.close()
	if err := d.newRelay(fast); err != nil {
		return err
	}

	fmt.Fprintf(out, "Backstop demo: %d messages on %d streams to 2 webhooks (orders, billing), SQLite in %s\n",
		d.total, len(demoDestinations)*o.streams, dir)
	fmt.Fprintf(out, "the endpoints fail on purpose: 503 blips, a %s outage of billing, 429 with Retry-After, %d messages refused with 422\n\n",
		o.outage, len(d.hook.plan.bad))

	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- d.relay.Run(runCtx) }()

	d.start = time.Now()
	d.hook.start = d.start
	produced := make(chan error, 1)
	go func() { produced <- d.produce(runCtx) }()

	finished, err := d.follow(ctx, out, produced)
	elapsed := time.Since(d.start)
	if err != nil || !finished {
		stopRelay()
		return errors.Join(err, <-relayDone, ctx.Err())
	}
	if err := d.summary(ctx, out, elapsed); err != nil {
		stopRelay()
		return errors.Join(err, <-relayDone)
	}
	if o.exit {
		stopRelay()
		return <-relayDone
	}
	err = d.serveAdmin(ctx, out)
	stopRelay()
	return errors.Join(err, <-relayDone)
}

// plan places the messages the endpoints refuse: three in the middle of
// their stream (the later messages wait behind them, strict order) and one
// at the end of its stream.
func (d *demoRun) plan() demoPlan {
	s, n := d.o.streams, d.o.steps
	bad := map[msgKey]bool{}
	used := map[streamKey]bool{}
	for _, b := range []struct {
		dest         string
		stream, step int
	}{{"orders", 3, n * 3 / 5}, {"orders", 11, n * 9 / 10}, {"billing", 7, n * 2 / 5}, {"billing", 18, n}} {
		k := msgKey{streamKey{b.dest, demoStream(b.dest, b.stream%s)}, min(max(b.step, 1), n)}
		if used[k.streamKey] {
			continue // one per stream: the first holds the rest of it
		}
		used[k.streamKey] = true
		bad[k] = true
		d.held += n - k.step
	}
	return demoPlan{outageDest: "billing", outageFrom: 500 * time.Millisecond, outageTo: 500*time.Millisecond + d.o.outage, bad: bad,
		throttleAfter: max(s*n/5, 1)} // a fifth of the way through orders
}

func demoStream(dest string, i int) string { return fmt.Sprintf("%s-customer-%02d", dest[:1], i+1) }

func (d *demoRun) newRelay(fast retry.Strategy) error {
	dests := map[string]relay.Destination{}
	for _, name := range demoDestinations {
		tr, err := webhook.New(webhook.Config{URL: d.hook.url(name), Secret: demoSecret, Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		breaker := &circuitbreaker.Config{MaxFailures: 5, Timeout: 500 * time.Millisecond}
		if name == d.hook.plan.outageDest {
			breaker.OnStateChange = d.hook.breakerChanged
		}
		dests[name] = relay.Destination{
			Transport: tr,
			InProcess: retry.NewConfig(2, retry.NewFixedDelay(25*time.Millisecond, false)),
			Breaker:   breaker,
			Timeout:   5 * time.Second,
		}
	}
	logs := d.o.logs
	if logs == nil {
		logs = io.Discard
	}
	r, err := relay.New(d.st, relay.Config{
		Destinations:    dests,
		Workers:         16,
		PollInterval:    20 * time.Millisecond,
		MaxPollInterval: 200 * time.Millisecond,
		Tracker:         tracker.RegistryConfig{Config: tracker.Config{Strategy: fast}},
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics:         d.reg,
	})
	d.relay = r
	return err
}

// produce writes the messages as an application would: in rounds, each
// stream's share of a round in one transaction with the business row it
// belongs to.
func (d *demoRun) produce(ctx context.Context) error {
	db := d.st.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE demo_orders (stream TEXT, step INTEGER, amount INTEGER)`); err != nil {
		return err
	}
	const rounds = 10
	per := (d.o.steps + rounds - 1) / rounds
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for from := 1; from <= d.o.steps; from += per {
		for _, dest := range demoDestinations {
			for s := 0; s < d.o.streams; s++ {
				if err := d.writeSteps(ctx, db, dest, demoStream(dest, s), from, min(from+per-1, d.o.steps)); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func (d *demoRun) writeSteps(ctx context.Context, db *sql.DB, dest, stream string, from, to int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var msgs []*outbox.Message
	for step := from; step <= to; step++ {
		amount := 100 + step
		if d.hook.plan.bad[msgKey{streamKey{dest, stream}, step}] {
			amount = -amount
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO demo_orders VALUES (?, ?, ?)`, stream, step, amount); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		msgs = append(msgs, &outbox.Message{
			Destination: dest, Stream: stream, Type: dest + ".step",
			Payload: fmt.Appendf(nil, `{"step":%d,"amount":%d}`, step, amount),
		})
	}
	if err := d.st.EnqueueTx(ctx, tx, msgs...); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}
