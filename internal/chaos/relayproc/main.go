// Command relayproc is the relay process of the chaos suite: Backstop's
// relay, as a library, delivering one store's outbox to one webhook until
// it receives SIGTERM or SIGINT (then it shuts down gracefully) or is
// killed. The chaos tests build it and run several at once.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport/webhook"
)

// Destination is the one destination of the chaos suite's messages.
const Destination = "chaos"

type options struct {
	kind, db, schema, url, secret, instance string
	clockFile                               string
	lease, instanceTimeout, breakerTimeout  time.Duration
	workers                                 int
}

func main() {
	var o options
	flag.StringVar(&o.kind, "store", "postgres", "postgres or sqlite")
	flag.StringVar(&o.db, "db", "", "PostgreSQL URL (with application_name) or SQLite path")
	flag.StringVar(&o.schema, "schema", "", "PostgreSQL schema of the tables")
	flag.StringVar(&o.url, "url", "", "the webhook receiver's URL")
	flag.StringVar(&o.secret, "secret", "", "the webhook signing secret")
	flag.StringVar(&o.instance, "instance", "", "the relay instance id")
	flag.DurationVar(&o.lease, "lease", 2*time.Second, "the store's lease")
	flag.DurationVar(&o.instanceTimeout, "instance-timeout", 10*time.Second, "the store's instance timeout")
	flag.DurationVar(&o.breakerTimeout, "breaker-timeout", time.Second, "the breaker's open time")
	flag.IntVar(&o.workers, "workers", 8, "the relay's workers")
	flag.StringVar(&o.clockFile, "clock-file", "", "a file holding how far the store's clock runs ahead of the host's "+
		"(a Go duration), read at start and again on SIGUSR1: the chaos suite steps the database's clock this way")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("relayproc failed", "instance", o.instance, "error", err.Error())
		os.Exit(1)
	}
}

// StoreConfig is the store configuration every chaos process and the
// tests' load generator agree on: strict ordering, short retry waits, a
// short lease.
func storeConfig(o options) store.Config {
	return store.Config{
		LeaseDuration:   o.lease,
		InstanceTimeout: o.instanceTimeout,
		DefaultPolicy: store.Policy{
			Strategy: retry.NewExponentialBackoff(100*time.Millisecond, 2*time.Second, true),
		},
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	var (
		st  store.Store
		err error
	)
	cfg := storeConfig(o)
	if o.clockFile != "" {
		c, err := stepClockFrom(ctx, o.clockFile, log)
		if err != nil {
			return err
		}
		cfg.Clock = c
	}
	switch o.kind {
	case "postgres":
		st, err = postgres.Open(ctx, o.db, cfg, postgres.WithSchema(o.schema))
	case "sqlite":
		st, err = sqlite.Open(ctx, o.db, cfg)
	default:
		err = fmt.Errorf("unknown store %q", o.kind)
	}
	if err != nil {
		return err
	}
	defer st.Close()

	tr, err := webhook.New(webhook.Config{
		URL:     o.url,
		Secret:  []byte(o.secret),
		Timeout: 2 * time.Second,
		Headers: map[string]string{"X-Chaos-Instance": o.instance},
	})
	if err != nil {
		return err
	}
	defer tr.Close()

	poll := 50 * time.Millisecond
	r, err := relay.New(st, relay.Config{
		Instance: store.Instance{ID: o.instance},
		Destinations: map[string]relay.Destination{Destination: {
			Transport: tr,
			InProcess: retry.NewConfig(2, retry.NewFixedDelay(50*time.Millisecond, false)),
			Breaker:   &circuitbreaker.Config{Timeout: o.breakerTimeout},
			Timeout:   3 * time.Second,
		}},
		Workers:         o.workers,
		PollInterval:    poll,
		MaxPollInterval: 4 * poll,
		ShutdownTimeout: 5 * time.Second,
		Tracker: tracker.RegistryConfig{Config: tracker.Config{
			Strategy: retry.NewExponentialBackoff(100*time.Millisecond, o.breakerTimeout, false),
		}},
		Logger: log,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// stepClock is the store's clock of a process run with -clock-file: the
// host's, ahead by the offset the file holds, which the chaos suite
// raises to step the database's clock forward with no time passing (on
// PostgreSQL the store then stamps every statement with it). Its
// monotonic reading is the process's own, which the step does not move.
type stepClock struct {
	offset atomic.Int64
	start  time.Time
}

func (c *stepClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *stepClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }

func (c *stepClock) Monotonic() time.Duration { return time.Since(c.start) }

// stepClockFrom returns a stepClock reading its offset from path now and
// on every SIGUSR1 until ctx ends.
func stepClockFrom(ctx context.Context, path string, log *slog.Logger) (*stepClock, error) {
	c := &stepClock{start: time.Now()}
	read := func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("clock file %s: %w", path, err)
		}
		c.offset.Store(int64(d))
		return nil
	}
	if err := read(); err != nil {
		return nil, err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				if err := read(); err != nil {
					log.Error("reading the clock file failed", "error", err.Error())
				}
			}
		}
	}()
	return c, nil
}
