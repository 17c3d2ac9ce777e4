package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/natsinbox"
	"github.com/backstophq/backstop/inbox/rabbitinbox"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/webhook"
)

// sourceSet is what serve runs for the config's sources: one inbox per
// source, its receiver, and the forwarding of what it received.
//
// A source's inbox is served by serve's own relay (its destination
// inbox:<name> is one more destination there), so the admin API, the
// dashboard, the breakers and /metrics cover its rows as they cover the
// outbox's; the receivers' counters (backstop_inbox_*) are on /metrics
// too.
type sourceSet struct {
	srcs []*source
	// own are the listeners of the HTTP sources with addresses of their
	// own, open from newSources on (so that a busy address stops serve
	// at its start), with the handlers of the sources on each.
	own []ownListener
	log *slog.Logger
}

// ownListener is an address of HTTP sources' own.
type ownListener struct {
	ln  net.Listener
	mux *http.ServeMux
}

// source is one configured source, ready to run.
type source struct {
	cfg *config.Source
	in  *inbox.Inbox
	fwd *forwarder
	// run receives (nats, rabbitmq); nil for http.
	run func(ctx context.Context) error
	// handler receives (http).
	handler http.Handler
	close   func()
	// health says why the source cannot receive now (its broker
	// connection lost), nil when it can; nil for http.
	health func(ctx context.Context) error
}

// sweepInterval is how often serve deletes a source's expired
// de-duplication records.
const sweepInterval = inbox.DefaultSweepInterval

// newSources makes the inbox and the receiver of every source of c. A
// NATS source connects and creates (or updates) its durable consumer
// here, so that a mistake shows before serve starts; a RabbitMQ source
// connects when it runs.
func newSources(ctx context.Context, c *config.Config, st store.Store, reg prometheus.Registerer, logger *slog.Logger) (*sourceSet, error) {
	set := &sourceSet{log: logger}
	if len(c.Sources) == 0 {
		return set, nil
	}
	si, ok := st.(store.Inbox)
	if !ok {
		return nil, fmt.Errorf("sources need a store that implements store.Inbox, not %T", st)
	}
	for i := range c.Sources {
		s, err := newSource(ctx, &c.Sources[i], st, si, reg, logger)
		if err != nil {
			set.close()
			return nil, fmt.Errorf("sources[%d] (inbox %s): %w", i, c.Sources[i].Inbox, err)
		}
		set.srcs = append(set.srcs, s)
	}
	byAddr := map[string]*http.ServeMux{}
	for _, s := range set.srcs {
		if s.handler == nil || s.cfg.Listen == "" {
			continue
		}
		mux := byAddr[s.cfg.Listen]
		if mux == nil {
			ln, err := net.Listen("tcp", s.cfg.Listen)
			if err != nil {
				set.close()
				return nil, fmt.Errorf("http source %s: %w", s.cfg.Inbox, err)
			}
			mux = http.NewServeMux()
			byAddr[s.cfg.Listen] = mux
			set.own = append(set.own, ownListener{ln: ln, mux: mux})
		}
		mux.Handle(s.cfg.Path, s.handler)
	}
	return set, nil
}

func newSource(ctx context.Context, sc *config.Source, st store.Store, si store.Inbox, reg prometheus.Registerer, logger *slog.Logger) (*source, error) {
	in, err := inbox.New(st, inbox.Config{
		Name:        sc.Inbox,
		Relay:       relay.Config{Logger: logger},
		DedupWindow: sc.DedupWindow.D(),
		// serve's relay runs the forwarding and sweeps (sourceSet.run).
		SweepInterval: -1,
		Metrics:       reg,
	})
	if err != nil {
		return nil, err
	}
	s := &source{cfg: sc, in: in, fwd: &forwarder{st: si, to: sc.Forward.To}, close: func() {}}
	kind, header := sc.StreamKeyOf()
	log := logger.With(slog.String("inbox", sc.Inbox))
	switch sc.Type {
	case "nats":
		return s, s.openNATS(ctx, kind, header, log)
	case "rabbitmq":
		r, err := rabbitinbox.New(rabbitinbox.Config{
			Inbox: in, URL: sc.URL, Queue: sc.Queue, Prefetch: sc.Prefetch, Logger: log,
			StreamKey: func(d *amqp.Delivery) string {
				switch kind {
				case "header":
					return tableHeader(d.Headers, header)
				case "routing_key":
					return d.RoutingKey
				}
				return ""
			},
		})
		if err != nil {
			return nil, err
		}
		s.run = r.Run
		s.health = func(context.Context) error {
			_, err := r.Consuming()
			return err
		}
	case "http":
		h, err := in.HTTPHandler(inbox.HTTPConfig{Secrets: sc.Secrets(), Tolerance: sc.Tolerance.D(), Headers: sc.Headers})
		if err != nil {
			return nil, err
		}
		s.handler = streamKeyHeader(kind, header, h)
	}
	return s, nil
}

// openNATS opens the source's NATS server connection and creates or
// updates its durable consumer: explicit acks, one message in flight (so
// that a redelivery cannot overtake a later message of its stream). A
// mistake the server refuses (natsinbox.IsPermanent: the stream missing,
// an invalid name, credentials refused) is the error, so that serve does
// not start with it; a server that cannot be reached is not: the source
// starts not ready, says why on /readyz, and is opened once the server is
// back (natsOpener.run).
func (s *source) openNATS(ctx context.Context, kind, header string, log *slog.Logger) error {
	n := &natsOpener{s: s, log: log, newRx: func(cons jetstream.Consumer) (*natsinbox.Receiver, error) {
		return natsinbox.New(natsinbox.Config{Inbox: s.in, Consumer: cons, Logger: log,
			StreamKey: func(m jetstream.Msg) string {
				switch kind {
				case "header":
					return natsHeader(m.Headers(), header)
				case "subject":
					return m.Subject()
				}
				return ""
			}})
	}}
	if err := n.open(ctx); err != nil {
		if natsinbox.IsPermanent(err) || ctx.Err() != nil {
			n.close()
			return err
		}
		log.Warn("NATS source not open: its server cannot be reached; serving without it until it can, trying again",
			"error", err.Error())
	}
	s.run, s.health, s.close = n.run, n.health, n.close
	return nil
}

// natsSourceOptions are the options of a NATS source's connection: it
// reconnects for ever, and its connection events and asynchronous errors
// go to log.
func natsSourceOptions(inboxName string, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.Name("backstop serve: inbox " + inboxName), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS connection lost; reconnecting", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS connection restored") }),
		// Without it nats.go prints asynchronous errors (a slow consumer,
		// a permission refused) on stderr, out of the operator's logs.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"error", err.Error()}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Warn("NATS asynchronous error", attrs...)
		}),
	}
}

// natsHeader returns the first value of header name, in any case.
func natsHeader(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0]
		}
	}
	return ""
}

// tableHeader returns the header name of an AMQP table, in any case, as
// text: a string, or an integer in decimal (publishers often send an
// account or order id as one; it gave no ordering key, and its messages
// went unordered without a word). Other types give "".
func tableHeader(t amqp.Table, name string) string {
	for k, v := range t {
		if !strings.EqualFold(k, name) {
			continue
		}
		switch v := v.(type) {
		case string:
			return v
		case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, uint:
			return fmt.Sprint(v)
		}
	}
	return ""
}

// streamKeyHeader makes the HTTP receiver read the ordering key from the
// configured header: it sets the request's Backstop-Stream from it (the
// signature covers the id, the timestamp and the body, not the headers).
func streamKeyHeader(kind, header string, h http.Handler) http.Handler {
	if kind == "header" && http.CanonicalHeaderKey(header) == webhook.HeaderStream {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := ""
		if kind == "header" {
			v = r.Header.Get(header)
		}
		r.Header.Del(webhook.HeaderStream)
		if v != "" {
			r.Header.Set(webhook.HeaderStream, v)
		}
		h.ServeHTTP(w, r)
	})
}

// addDestinations adds each source's inbox destination to the relay's.
func (set *sourceSet) addDestinations(dests map[string]relay.Destination) {
	for _, s := range set.srcs {
		dests[s.in.DestinationName()] = relay.Destination{Transport: s.fwd}
	}
}

// checks are the readiness checks of the sources that hold a broker
// connection, named source:INBOX.
func (set *sourceSet) checks() []check {
	var out []check
	for _, s := range set.srcs {
		if s.health != nil {
			out = append(out, check{name: "source:" + s.cfg.Inbox, fn: s.health})
		}
	}
	return out
}

// handle registers the HTTP sources on the server's listener on mux.
func (set *sourceSet) handle(mux *http.ServeMux) {
	for _, s := range set.srcs {
		if s.handler != nil && s.cfg.Listen == "" {
			mux.Handle(s.cfg.Path, s.handler)
		}
	}
}

// run runs the receivers, the HTTP sources' own servers and the sweeps
// until ctx is done, then returns nil; or until one of them fails, then
// stops the others and returns its error.
func (set *sourceSet) run(ctx context.Context) error {
	if len(set.srcs) == 0 {
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := func(what string, fn func(ctx context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", what, err)
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	for _, s := range set.srcs {
		what := fmt.Sprintf("source %s (%s)", s.cfg.Inbox, s.cfg.Type)
		if s.run != nil {
			start(what, s.run)
		}
		start(what+" sweep", s.sweepLoop(set.log))
	}
	for _, o := range set.own {
		start("http sources on "+o.ln.Addr().String(), func(ctx context.Context) error { return serveHTTPSource(ctx, o.ln, o.mux, set.log) })
	}
	wg.Wait()
	return firstErr
}

// serveHTTPSource serves HTTP sources on a listener of their own until
// ctx is done.
func serveHTTPSource(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	logger.Info("receiving webhooks", "listen", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}

// sweepLoop deletes the source's expired de-duplication records every
// sweepInterval.
func (s *source) sweepLoop(logger *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(sweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if _, err := s.in.Sweep(ctx); err != nil && ctx.Err() == nil {
				logger.Warn("sweep of de-duplication records failed", "inbox", s.cfg.Inbox, "error", err.Error())
			}
		}
	}
}

// close releases the sources' connections and listeners.
func (set *sourceSet) close() {
	for _, s := range set.srcs {
		s.close()
	}
	for _, o := range set.own {
		_ = o.ln.Close()
	}
}
