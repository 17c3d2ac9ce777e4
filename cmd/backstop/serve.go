package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dashboard"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
)

func newServeCmd(g *globals) *cobra.Command {
	var cfgPath, listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the relay, the sources, the admin API, /metrics, /healthz and /readyz in one process",
		Long: `serve delivers the outbox of the store (--db, else the config's db, else
sqlite:./backstop.db) to the destinations of the config file, and serves the
admin API on the config's listen address (127.0.0.1:8080 by default). Several
serve processes on one PostgreSQL share the work. SIGTERM, SIGHUP or Ctrl-C
stops claiming, finishes or releases what is in flight, and exits; a second
one exits at once.

The config's sources receive messages from a NATS JetStream consumer, a
RabbitMQ queue or signed webhooks into inboxes, each once, and forward
them to destinations (docs/configuration.md, sources[]).

Tokens come from the config's tokens and BACKSTOP_ADMIN_TOKEN (an operate
token named "env"). serve refuses to listen beyond loopback without one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			if g.db != "" {
				c.DB = g.db
			}
			if listen != "" {
				c.Listen = listen
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			return serve(cmd.Context(), c, logger, nil)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "backstop.yaml", "the configuration file")
	cmd.Flags().StringVar(&listen, "listen", "", "the admin API's address (overrides the config's listen)")
	return cmd
}

// tokensOf returns the admin tokens of the config and the environment's
// BACKSTOP_ADMIN_TOKEN, which is held to the config's rules: at least 16
// characters (it opened a listener beyond loopback with one character),
// and not another token's value (the first match wins, so an operate token
// equal to a read token was silently read-only).
func tokensOf(c *config.Config) ([]admin.Token, error) {
	var out []admin.Token
	for _, t := range c.Tokens {
		out = append(out, admin.Token{Name: t.Name, Secret: t.Token, Role: t.Role})
	}
	v := os.Getenv("BACKSTOP_ADMIN_TOKEN")
	if v == "" {
		return out, nil
	}
	if len(v) < config.MinTokenLen {
		return nil, fmt.Errorf("BACKSTOP_ADMIN_TOKEN must be at least %d characters, got %d", config.MinTokenLen, len(v))
	}
	if why := admin.TokenProblem(v); why != "" {
		return nil, fmt.Errorf("BACKSTOP_ADMIN_TOKEN %s", why)
	}
	for _, t := range out {
		if t.Secret == v {
			return nil, fmt.Errorf("BACKSTOP_ADMIN_TOKEN is the same as the config's token %q", t.Name)
		}
		if t.Name == "env" {
			// the audit log names the actor by its token's name
			return nil, fmt.Errorf(`BACKSTOP_ADMIN_TOKEN's token is named "env", as is one of the config's tokens: rename that one`)
		}
	}
	return append(out, admin.Token{Name: "env", Secret: v, Role: admin.RoleOperate}), nil
}

// loopback reports whether addr's host only listens on this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve runs until ctx is done. ready, when set, gets the listening
// address.
func serve(ctx context.Context, c *config.Config, logger *slog.Logger, ready func(addr string)) error {
	tokens, err := tokensOf(c)
	if err != nil {
		return err
	}
	if len(tokens) == 0 && !loopback(c.Listen) {
		return fmt.Errorf("refusing to listen on %s beyond loopback without an admin token: add tokens to the config or set BACKSTOP_ADMIN_TOKEN", c.Listen)
	}
	if len(tokens) == 0 {
		logger.Warn("no admin token: every /v1 request will be refused (set BACKSTOP_ADMIN_TOKEN or the config's tokens)")
	}
	sc := c.StoreConfig()
	sc.Logger = logger
	st, err := openStore(ctx, c.DB, sc)
	if err != nil {
		return err
	}
	// closeBy is the end of the shutdown's budget, set once it starts.
	var closeBy time.Time
	defer func() { closeStore(st, closeBy, logger) }()

	rc, transports, err := c.RelayConfig(ctx, logger)
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range transports {
			_ = t.Close()
		}
	}()
	if err := addFanOut(&rc, c, st); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srcs, err := newSources(ctx, c, st, reg, logger)
	if err != nil {
		return err
	}
	defer srcs.close()
	srcs.addDestinations(rc.Destinations)
	rc.Metrics, rc.Logger = reg, logger
	r, err := relay.New(st, rc)
	if err != nil {
		return err
	}
	var names []string
	for name := range rc.Destinations {
		names = append(names, name)
	}
	wf, err := workflowsOf(ctx, st)
	if err != nil {
		return err
	}
	api, err := admin.New(admin.Config{
		Store: st, Tokens: tokens, Destinations: names, Route: c.RouteTopic,
		Breakers: admin.RelayBreakers(r), MaxBodyBytes: c.MaxBodyBytes,
		RequestTimeout: time.Duration(c.RequestTimeout), Logger: logger, Workflows: wf,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", dashboard.Handler()) // the web dashboard, a client of the API
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hl := &health{checks: append([]check{storeCheck(st)}, srcs.checks()...),
		lastRound: r.LastRound, maxPoll: r.Config().MaxPollInterval, now: time.Now}
	if len(tokens) > 0 {
		hl.detailed = api.Authorized
	}
	mux.HandleFunc("GET /healthz", hl.healthz)
	mux.HandleFunc("GET /readyz", hl.readyz)
	srcs.handle(mux)

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	// The requests' contexts descend from reqCtx, cancelled once the
	// shutdown's deadline passes: a request still running then (one
	// waiting on a database that stopped answering) holds a connection
	// of the store's pool, whose Close waits for it, and serve never
	// returned.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	logger.Info("backstop serving", "listen", ln.Addr().String(), "db", redactDB(c.DB), "destinations", len(names), "sources", len(srcs.srcs))
	if ready != nil {
		ready(ln.Addr().String())
	}
	// runCtx stops the relay and the sources when serve ends for any
	// reason.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	relayErr := make(chan error, 1)
	go func() { relayErr <- r.Run(runCtx) }()
	srcErr := make(chan error, 1)
	go func() { srcErr <- srcs.run(runCtx) }()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		runErr = fmt.Errorf("admin API: %w", err)
	case err := <-relayErr:
		runErr = fmt.Errorf("relay: %w", err)
		relayErr <- nil
	case err := <-srcErr:
		if err != nil {
			runErr = fmt.Errorf("sources: %w", err)
		}
		srcErr <- nil
	}
	logger.Info("backstop shutting down", slog.String("again", "a second SIGINT or SIGTERM ends the process at once"))
	stopRun()
	closeBy = time.Now().Add(addSaturating(c.Relay.ShutdownTimeout.D(), 5*time.Second))
	sctx, cancel := context.WithDeadline(context.Background(), closeBy)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
	if shutdownErr != nil {
		cancelRequests() // the requests left end now, and give their connections back
		_ = srv.Close()
	}
	if errors.Is(shutdownErr, http.ErrServerClosed) {
		shutdownErr = nil
	}
	return errors.Join(runErr, shutdownErr, <-relayErr, <-srcErr)
}

// minStoreClose is the least time closeStore gives the store's Close.
const minStoreClose = 2 * time.Second

// closeStore closes st, waiting for it until by (at least minStoreClose;
// by zero: the shutdown never started, minStoreClose too). A pool's Close
// waits for every connection it destroys, and pgx gives a connection to a
// database that stopped answering 15 s to take its cancel request: serve
// outlasted relay.shutdown_timeout by that much, or for good while a
// request held a connection. What is left closes as the process exits.
func closeStore(st store.Store, by time.Time, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.Close()
	}()
	t := time.NewTimer(max(time.Until(by), minStoreClose))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn("the store's connections did not close within the shutdown's time; left to close as the process exits")
	}
}

// redactDB hides the secrets of a database or broker URL (or a
// key=value connection string) for logs and messages.
func redactDB(db string) string { return config.Redact(db) }

// addSaturating is a+b, or the longest duration where that overflows (a
// shutdown_timeout near it turned the server's shutdown deadline negative:
// serve exited 1 at once).
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
