package natstransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// DefaultSubject is the subject template used when Config.Subject and
// Config.SubjectFunc are unset.
const DefaultSubject = "backstop.{destination}.{type}"

// DefaultTimeout bounds a publish when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Config configures a Transport.
type Config struct {
	// URL is the NATS server to dial, such as "nats://127.0.0.1:4222" (a
	// comma-separated list for a cluster). The Transport owns that
	// connection: it reconnects forever, is dialed again by the next
	// Deliver when the client closed it for good, and Close closes it.
	// Required unless Conn is set; ignored when Conn is set.
	URL string
	// Conn is an established connection to publish on instead of dialing
	// URL. The caller owns it: Close leaves it open.
	Conn *nats.Conn
	// Subject is where messages are published: a fixed subject, or a
	// template in which {destination}, {type}, {stream} and {id} are
	// replaced by the message's fields. Empty means DefaultSubject. A
	// message whose subject comes out invalid (an empty token, a wildcard,
	// white space) fails with a permanent fault of the message.
	Subject string
	// SubjectFunc, when set, returns the subject of each message and
	// Subject is ignored.
	SubjectFunc func(m *outbox.Message) string
	// Stream is the name of the JetStream stream expected to capture the
	// subjects. When set, New fails unless the stream exists, and each
	// publish carries Nats-Expected-Stream so that a message captured by
	// any other stream is refused (a transient fault of the destination).
	// Empty means any stream.
	Stream string
	// Timeout bounds each publish, from sending to receiving the PubAck,
	// and New's stream check. Zero means DefaultTimeout; negative is
	// invalid.
	Timeout time.Duration
	// Limits bound the messages the transport publishes; zero fields mean
	// outbox's defaults (a payload of at most 1 MiB, NATS's own default
	// max_payload). A message over a limit, or that outbox validation
	// refuses, fails before publishing as a permanent fault of the
	// message. The server's max_payload still applies: a larger payload
	// fails with code message_too_large, also the message's fault.
	Limits outbox.Limits
	// AllowReservedHeaders lets a message's Nats-* headers through, such
	// as Nats-Expected-Last-Sequence for optimistic concurrency or
	// Nats-TTL; Nats-Msg-Id (the message id) and, with Stream,
	// Nats-Expected-Stream are the transport's whatever this says. False
	// (the default) drops every header of a message whose name starts
	// with "Nats-" in any case: JetStream acts on them, and a message
	// must not change how the stream stores it unless the destination
	// says so.
	AllowReservedHeaders bool
	// Logger receives what the connection the Transport dials reports
	// outside any publish: asynchronous errors from the server (such as a
	// permissions violation), disconnections and reconnections. Nil means
	// slog.Default(). Unused when Conn is set: its owner set its handlers.
	Logger *slog.Logger
}

// withDefaults returns c with the zero values replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate names the first bad field.
func (c Config) validate() error {
	switch {
	case c.URL == "" && c.Conn == nil:
		return errors.New("natstransport: Config.URL is required when Config.Conn is nil")
	case c.Timeout < 0:
		return fmt.Errorf("natstransport: Config.Timeout must not be negative (got %v)", c.Timeout)
	case CheckStreamName(c.Stream) != nil:
		return fmt.Errorf("natstransport: Config.Stream %q is not a valid stream name", c.Stream)
	}
	if c.SubjectFunc == nil {
		if err := CheckSubjectTemplate(c.Subject); err != nil {
			return fmt.Errorf("natstransport: Config.Subject: %w", err)
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("natstransport: Config.Limits: %w", err)
	}
	return nil
}

// Transport publishes messages to JetStream. It implements
// transport.Transport and is safe for concurrent use.
type Transport struct {
	cfg     Config
	owned   bool          // the connection was dialed here: redialed when closed, closed by Close
	dialing chan struct{} // held while dialing again: one dial at a time

	checking atomic.Bool // a checkAlive is under way
	denied   denials     // the permissions violations the server reported
	noAck    noAcks      // the streams found not to acknowledge publishes

	// mu guards the fields below. It is never held while dialing.
	mu     sync.Mutex
	nc     *nats.Conn
	js     jetstream.JetStream
	closed bool
}

var _ transport.Transport = (*Transport)(nil)

// New connects (unless cfg.Conn is set) and, when cfg.Stream is set,
// checks that the stream exists. A bad URL, refused credentials or a
// missing stream are reported here, so that a misconfigured destination
// refuses to start; failures after New are delivery faults. A server that
// cannot be reached (nothing listening, the dial timing out) is not an
// error: New returns a Transport whose connection keeps trying in the
// background, with a warning on Config.Logger, and whose deliveries fail
// as transient faults until the server is back; the stream is then not
// checked.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, nc: cfg.Conn, dialing: make(chan struct{}, 1)}
	if t.nc == nil {
		nc, err := t.dial()
		if err != nil && unreachable(err) {
			t.cfg.Logger.Warn("natstransport: the server cannot be reached; connecting in the background, deliveries fail until it is back",
				slog.String("server", redact(t.cfg.URL)), slog.String("error", err.Error()))
			nc, err = t.dialInBackground()
		}
		if err != nil {
			return nil, err
		}
		t.nc, t.owned = nc, true
	}
	js, err := jetstream.New(t.nc)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("natstransport: jetstream: %w", err)
	}
	t.js = js
	if cfg.Stream != "" && t.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		defer cancel()
		if _, err := js.Stream(ctx, cfg.Stream); err != nil {
			t.Close()
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil, fmt.Errorf("natstransport: Config.Stream: stream %q does not exist: %w", cfg.Stream, err)
			}
			return nil, fmt.Errorf("natstransport: Config.Stream: look up stream %q: %w", cfg.Stream, err)
		}
	}
	return t, nil
}

// Deliver publishes m and waits for JetStream's PubAck. A PubAck that
// reports a duplicate (m was already stored within the duplicate window)
// is a success. Errors are classified as the package documentation
// describes; when ctx is done the error wraps ctx.Err().
func (t *Transport) Deliver(ctx context.Context, m *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return classify(ctx, fmt.Errorf("natstransport: deliver %s: %w", m.ID, err))
	}
	if err := m.ValidateLimits(t.cfg.Limits); err != nil {
		return transport.Unsendable(fmt.Errorf("natstransport: message %s cannot be published: %w", m.ID, err),
			errorhandling.ReasonValidationFailure, "invalid_message")
	}
	subject := t.subject(m)
	if err := checkSubject(subject); err != nil {
		return transport.Unsendable(fmt.Errorf("natstransport: deliver %s: %w", m.ID, err), errorhandling.ReasonValidationFailure, "invalid_subject")
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Payload
	id := m.ID.String()
	setHeaders(msg.Header, m, t.cfg.AllowReservedHeaders, t.cfg.Stream != "")
	if err := checkBlankEdges(m, msg.Header); err != nil {
		return transport.Unsendable(fmt.Errorf("natstransport: message %s cannot be published: %w", m.ID, err),
			errorhandling.ReasonValidationFailure, "invalid_message")
	}
	if len(msg.Data) == 0 && msg.Header.Get(statusHeader) != "" {
		return transport.Unsendable(fmt.Errorf("natstransport: message %s cannot be published: an empty payload with a %s header (%.40q) is a server status message to NATS clients: JetStream consumers would never receive it",
			m.ID, statusHeader, msg.Header.Get(statusHeader)), errorhandling.ReasonValidationFailure, "invalid_message")
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if t.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(t.cfg.Stream))
	}

	pctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	js, err := t.jetStream(pctx)
	if err != nil {
		return classify(ctx, fmt.Errorf("natstransport: publish %s to %q: %w", m.ID, subject, err))
	}
	if err := transport.CheckSend(pctx); err != nil {
		return fmt.Errorf("natstransport: deliver %s: %w", m.ID, err)
	}
	if err := t.refuseNoAck(pctx, js, subject); err != nil {
		return transport.DestinationFault(fmt.Errorf("natstransport: publish %s to %q: not sent: %w", m.ID, subject, err),
			errorhandling.ReasonTransportUnavailable, "no_ack")
	}
	nc := js.Conn()
	dctx, deny := context.WithCancelCause(pctx)
	defer deny(nil)
	p, err := t.denied.start(nc, subject, deny)
	if err != nil {
		t.denied.recheck(nc, t.cfg.Timeout, time.Now())
		return transport.DestinationFault(fmt.Errorf("natstransport: publish %s to %q: not sent: %w", m.ID, subject, err),
			errorhandling.ReasonTransportUnavailable, "permission_denied")
	}
	defer t.denied.done(p)
	if _, err := js.PublishMsg(dctx, msg, opts...); err != nil {
		if cause := context.Cause(dctx); pctx.Err() == nil && errors.Is(cause, errDenied) {
			return transport.DestinationFault(fmt.Errorf("natstransport: publish %s to %q: %w", m.ID, subject, cause),
				errorhandling.ReasonTransportUnavailable, "permission_denied")
		}
		if ctx.Err() == nil && pctx.Err() != nil {
			t.checkAlive()
			t.noAckTimedOut(js, subject)
		}
		err = fmt.Errorf("natstransport: publish %s to %q: %w", m.ID, subject, err)
		if fault := maxBytes(pctx, js, msg, err); fault != nil {
			return fault
		}
		return classify(ctx, err)
	}
	// A PubAck with Duplicate set is a success too: the stream holds m.
	return nil
}

// Close closes the connection New dialed; a connection passed in
// Config.Conn is left open. Close is safe to call more than once.
func (t *Transport) Close() error {
	t.mu.Lock()
	nc, closed := t.nc, t.closed
	t.closed = true
	t.mu.Unlock()
	if !closed && t.owned {
		nc.Close()
	}
	return nil
}

// jetStream returns the JetStream context to publish with. The connection
// the Transport dialed reconnects by itself while the server is away, but
// the client closes it for good on some errors: a credential refused twice
// in a row while reconnecting, a protocol error the server answers with
// -ERR. Such a connection is dialed again (one dial at a time, bounded by
// ctx and Config.Timeout), so that the destination recovers once the
// server takes the Transport again instead of failing every later Deliver
// with "connection closed". A connection passed in Config.Conn, or one
// Close closed, is used as it is.
func (t *Transport) jetStream(ctx context.Context) (jetstream.JetStream, error) {
	t.mu.Lock()
	nc, js, closed := t.nc, t.js, t.closed
	t.mu.Unlock()
	if closed || !t.owned || !nc.IsClosed() {
		return js, nil
	}
	select {
	case t.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the connection to %s: %w", redact(t.cfg.URL), ctx.Err())
	}
	t.mu.Lock()
	if t.closed || t.nc != nc {
		// Closed meanwhile, or another Deliver dialed again.
		js = t.js
		t.mu.Unlock()
		<-t.dialing
		return js, nil
	}
	t.mu.Unlock()
	type dialed struct {
		js  jetstream.JetStream
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		// A dial that outlives ctx still installs its connection for the
		// next Deliver.
		defer func() { <-t.dialing }()
		js, err := t.redial(nc)
		done <- dialed{js, err}
	}()
	select {
	case d := <-done:
		return d.js, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("connect to %s: %w", redact(t.cfg.URL), ctx.Err())
	}
}

// checkAlive is called when a PubAck did not come within Config.Timeout.
// JetStream may just be slow, but the connection may also have gone
// silent (a NAT entry or a load balancer dropped it without a reset:
// writes still succeed, nothing comes back), which the client notices only
// once MaxPingsOut pings at PingInterval went unanswered, minutes later:
// every Deliver, and every probe of the relay's breaker, timed out on it
// until then. checkAlive pings the server in the background (one check at
// a time) and, when no pong comes within Config.Timeout, makes the
// connection reconnect at once. A connection passed in Config.Conn is its
// owner's to watch.
func (t *Transport) checkAlive() {
	if !t.owned || !t.checking.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	nc := t.nc
	t.mu.Unlock()
	go func() {
		defer t.checking.Store(false)
		if err := nc.FlushTimeout(t.cfg.Timeout); !errors.Is(err, nats.ErrTimeout) {
			return
		}
		if err := nc.ForceReconnect(); err == nil {
			t.cfg.Logger.Warn("natstransport: the server did not answer a ping after a publish timed out; reconnecting",
				slog.String("server", redact(t.cfg.URL)))
		}
	}()
}

// redial dials the server again to replace old, which the client closed,
// and installs the new connection unless Close was called meanwhile.
func (t *Transport) redial(old *nats.Conn) (js jetstream.JetStream, err error) {
	nc, err := t.dial()
	if err != nil {
		return nil, err
	}
	if js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natstransport: jetstream: %w", err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		nc.Close()
		return nil, fmt.Errorf("natstransport: %w", nats.ErrConnectionClosed)
	}
	t.nc, t.js = nc, js
	t.mu.Unlock()
	t.denied.forget(old)
	attrs := []any{slog.String("server", redact(nc.ConnectedUrl()))}
	if err := old.LastError(); err != nil {
		attrs = append(attrs, slog.String("closed_by", err.Error()))
	}
	t.cfg.Logger.Warn("natstransport: the connection was closed for good; dialed a new one", attrs...)
	return js, nil
}

// dial connects to Config.URL, reconnecting forever once connected.
func (t *Transport) dial() (*nats.Conn, error) {
	nc, err := nats.Connect(t.cfg.URL, append([]nats.Option{nats.Name("backstop"), nats.MaxReconnects(-1),
		nats.Timeout(t.cfg.Timeout), noReconnectBuffer}, t.handlers()...)...)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// A URL that does not parse: the error quotes it up to where
			// it broke, and the text it read as a port, both of which
			// may be the password.
			err = errors.New("not a valid URL (a user name or password holding a reserved character such as #, /, ?, @ or : must be percent-encoded)")
		}
		return nil, fmt.Errorf("natstransport: connect to %s: %w", redact(t.cfg.URL), err)
	}
	return nc, nil
}

// noReconnectBuffer makes a publish made while the connection is away fail
// at once (nats.ErrReconnectBufExceeded) instead of waiting in the client's
// reconnect buffer (8 MB by default) to be written once the connection is
// back. That write came after the Deliver had failed and the relay had
// released the message, however late (the connection reconnects for
// ever): another relay had delivered it and the later messages of its
// stream meanwhile, and past the stream's duplicate window it was stored a
// second time, after them, from a relay that no longer held its lease.
var noReconnectBuffer = nats.ReconnectBufSize(-1)

// unreachable reports whether err, from dial, says that the server could
// not be reached (nothing listening, a dial or handshake timing out), as
// opposed to refusing the connection (credentials) or a bad URL.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.As(err, &ne)
}

// dialInBackground returns a connection to Config.URL that is not
// connected yet and keeps trying (nats.RetryOnFailedConnect), logging
// once it connects. It is called once a dial found the server unreachable:
// it does not dial again before it returns. nats.Connect tries every
// server once before it hands the connection to its reconnect loop, and
// against a server that takes the connection and says nothing (a host
// that drops packets, a proxy with no server behind it) that try took
// Config.Timeout again: New took twice the timeout (a minute by default)
// for each such destination, and serve's start, which makes its
// transports one after another, ignored SIGTERM all that time.
func (t *Transport) dialInBackground() (*nats.Conn, error) {
	log := t.cfg.Logger
	d := &laterDialer{d: net.Dialer{Timeout: t.cfg.Timeout}}
	d.skip.Store(true)
	nc, err := nats.Connect(t.cfg.URL, append([]nats.Option{nats.Name("backstop"), nats.MaxReconnects(-1),
		nats.Timeout(t.cfg.Timeout), noReconnectBuffer, nats.RetryOnFailedConnect(true), nats.SetCustomDialer(d),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("natstransport: connected", slog.String("server", redact(nc.ConnectedUrl())))
		})}, t.handlers()...)...)
	d.skip.Store(false)
	if err != nil {
		return nil, fmt.Errorf("natstransport: connect to %s: %w", redact(t.cfg.URL), err)
	}
	return nc, nil
}

// laterDialer dials as d does, but fails at once while skip is set: the
// dials of nats.Connect's first pass, which dialInBackground leaves to the
// connection's reconnect loop.
type laterDialer struct {
	d    net.Dialer
	skip atomic.Bool
}

// errDialLater is the failure of a dial laterDialer skips.
var errDialLater = errors.New("natstransport: dialing in the background")

func (l *laterDialer) Dial(network, address string) (net.Conn, error) {
	if l.skip.Load() {
		return nil, errDialLater
	}
	return l.d.Dial(network, address)
}

// statusHeader is the header by which NATS clients tell a server's status
// message (a heartbeat, flow control, "no messages", an error) from a
// message: nats.go's JetStream consumers take a message with an empty
// payload and a non-empty Status header (that exact name) for one, and
// never hand it over.
const statusHeader = "Status"

// subject returns where m is published.
func (t *Transport) subject(m *outbox.Message) string {
	if t.cfg.SubjectFunc != nil {
		return t.cfg.SubjectFunc(m)
	}
	return expand(t.cfg.Subject, m)
}

// expand replaces the placeholders of template with m's fields. The
// replacement is one pass: a field containing "{type}" is not expanded
// again.
func expand(template string, m *outbox.Message) string {
	if !strings.Contains(template, "{") {
		return template
	}
	return strings.NewReplacer("{destination}", m.Destination, "{type}", m.Type,
		"{stream}", m.Stream, "{id}", m.ID.String()).Replace(template)
}

// InvalidNameChars are the characters no JetStream stream or consumer name
// may hold: the client refuses such a name before asking the server.
const InvalidNameChars = ">*. /\\\t\r\n"

// CheckStreamName reports a stream name JetStream refuses (white space,
// '.', '*', '>', '/' or '\\'); empty is valid (any stream).
func CheckStreamName(name string) error {
	if strings.ContainsAny(name, InvalidNameChars) {
		return fmt.Errorf("%q is not a valid stream name (no white space, '.', '*', '>', '/' or '\\')", name)
	}
	return nil
}

// CheckSubjectTemplate reports a subject template (Config.Subject) that no
// message can be published to, whatever its fields: a wildcard token, an
// empty token, white space or a control character outside the
// placeholders, or too long. Such a template failed every message as a
// permanent fault of the message, dead-lettering them all. Empty is valid
// (DefaultSubject).
func CheckSubjectTemplate(template string) error {
	if template == "" {
		return nil
	}
	// Each placeholder at its best: one valid token's worth of text. A
	// field can add tokens but never remove one the template has.
	best := strings.NewReplacer("{destination}", "x", "{type}", "x", "{stream}", "x", "{id}", "x").Replace(template)
	if err := checkSubject(best); err != nil {
		return fmt.Errorf("no message can be published to %q: %w", template, err)
	}
	return nil
}

// errBadSubject is wrapped by the error of a subject checkSubject refuses.
var errBadSubject = errors.New("invalid subject")

// MaxSubjectLen is the longest subject the Transport publishes to, in
// bytes. The server reads a publish's subject, reply subject and sizes as
// one protocol line of at most max_control_line bytes (4096 by default),
// and answers a longer one by closing the connection, failing every
// publish in flight on it; a longer subject is refused before publishing,
// as a fault of the message. The margin leaves room for the reply subject
// (a custom inbox prefix too) and the sizes.
const MaxSubjectLen = 3584

// checkSubject refuses subjects a publish must not use: empty, longer than
// MaxSubjectLen, with an empty token, a wildcard token, white space or a
// control character.
func checkSubject(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", errBadSubject)
	}
	if len(s) > MaxSubjectLen {
		return fmt.Errorf("%w %.40q...: %d bytes, longer than %d", errBadSubject, s, len(s), MaxSubjectLen)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w %q: white space or control character", errBadSubject, s)
		}
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return fmt.Errorf("%w %q: empty token", errBadSubject, s)
		case "*", ">":
			return fmt.Errorf("%w %q: wildcard", errBadSubject, s)
		}
	}
	return nil
}

// handlers are the connection's handlers of what it reports outside a
// publish, writing to Config.Logger (without them nats.go prints
// asynchronous errors on stderr) and telling t.denied of permissions
// violations and reconnections.
func (t *Transport) handlers() []nats.Option {
	log := t.cfg.Logger
	return []nats.Option{
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			t.denied.report(nc, err)
			attrs := []any{slog.String("error", err.Error())}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			log.Warn("natstransport: asynchronous error from the server", attrs...)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("natstransport: disconnected", slog.String("error", err.Error()))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			t.denied.reconnected()
			log.Info("natstransport: reconnected", slog.String("server", redact(nc.ConnectedUrl())))
		}),
	}
}

// redact drops the credentials from a comma-separated list of server URLs.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil || u.User == nil && strings.Contains(p, "@"):
			// Not a URL, or one that parsed as another: its user info
			// may hold the character that broke it (a '#' or '/' in the
			// password). What follows the last @ is the server.
			if at := strings.LastIndex(p, "@"); at >= 0 {
				scheme, _, ok := strings.Cut(p[:at], "://")
				if !ok {
					scheme = "nats"
				}
				parts[i] = strings.TrimSpace(scheme) + "://" + p[at+1:]
			}
		case u.User != nil:
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
