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
	"syscall"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
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
	switch o.kind {
	case "postgres":
		st, err = postgres.Open(ctx, o.db, storeConfig(o), postgres.WithSchema(o.schema))
	case "sqlite":
		st, err = sqlite.Open(ctx, o.db, storeConfig(o))
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
