package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// The headers the transport sets on every request. A message's own
// headers cannot override them.
const (
	// HeaderMessageID carries the message id: receivers de-duplicate
	// re-sends with it (delivery is at least once).
	HeaderMessageID = "Backstop-Message-Id"
	// HeaderStream carries the message's stream; absent when it has none.
	HeaderStream = "Backstop-Stream"
	// HeaderType carries the message's type.
	HeaderType = "Backstop-Type"
	// HeaderAttempt carries the number of this delivery attempt, from 1.
	HeaderAttempt = "Backstop-Attempt"
	// HeaderTimestamp carries the time of sending in Unix seconds; it is
	// part of what is signed.
	HeaderTimestamp = "Backstop-Timestamp"
	// HeaderSignature carries one or more comma-separated "v1=" HMAC
	// signatures; absent when Config.Secret is empty.
	HeaderSignature = "Backstop-Signature"
)

// userAgent is sent unless the message or Config.Headers set one.
const userAgent = "Backstop-Webhook/1"

// Transport POSTs messages to one URL. It is safe for concurrent use.
type Transport struct {
	url       string // as configured, for requests
	target    string // redacted, for errors
	secrets   [][]byte
	timeout   time.Duration
	headers   http.Header
	client    *http.Client
	ownClient bool
	maxBody   int64
	clock     clock.Clock
	closed    atomic.Bool
}

var _ transport.Transport = (*Transport)(nil)

// New returns a Transport for cfg, after applying defaults. A bad cfg is
// refused with an error naming the field and matching ErrInvalidConfig.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		url:     cfg.URL,
		target:  redact(u),
		timeout: cfg.Timeout,
		headers: make(http.Header, len(cfg.Headers)),
		client:  cfg.Client,
		maxBody: cfg.MaxResponseBody,
		clock:   cfg.Clock,
	}
	if len(cfg.Secret) > 0 {
		t.secrets = append(t.secrets, bytes.Clone(cfg.Secret))
		for _, s := range cfg.AdditionalSecrets {
			if len(s) > 0 {
				t.secrets = append(t.secrets, bytes.Clone(s))
			}
		}
	}
	for k, v := range cfg.Headers {
		t.headers.Set(k, v)
	}
	if t.client == nil {
		t.client, t.ownClient = defaultClient(), true
	}
	return t, nil
}

// Deliver POSTs m.Payload to the configured URL and waits for the answer,
// at most Config.Timeout. It returns nil on a 2xx. Otherwise its error
// says what happened (the status line and the start of the response body;
// never the payload or a secret) and how errorhandling's classifier is to
// treat it:
//
//   - 408, 425, 429 and 5xx: a transient fault of the destination, with
//     the response's Retry-After as errorhandling.RetryAfter.
//   - Other 4xx: a permanent fault of the message.
//   - 3xx: a transient fault of the destination, matching ErrRedirect.
//   - No response (refused or reset connections, DNS and TLS failures,
//     Config.Timeout running out): a transient fault of the destination;
//     a timeout matches ErrTimeout and context.DeadlineExceeded and has
//     reason TimeoutExceeded.
//   - ctx done: an error wrapping ctx.Err(), which does not match
//     ErrTimeout. When ctx is done before the call, nothing is sent.
//   - A header of m that HTTP cannot carry: a permanent fault of the
//     message.
//
// Errors wrap a *StatusError when the destination answered.
func (t *Transport) Deliver(ctx context.Context, m *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("webhook: deliver %s: %w", m.ID, err)
	}
	if t.closed.Load() {
		return errorhandling.Transient(fmt.Errorf("%w: deliver %s", ErrClosed, m.ID))
	}
	dctx, cancel := context.WithTimeoutCause(ctx, t.timeout, ErrTimeout)
	defer cancel()
	req, err := t.request(dctx, m)
	if err != nil {
		return err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return t.noResponse(ctx, dctx, err)
	}
	return t.outcome(resp)
}

// request builds the POST for m.
func (t *Transport) request(ctx context.Context, m *outbox.Message) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(m.Payload))
	if err != nil {
		return nil, errorhandling.WithBlame(errorhandling.Permanent(fmt.Errorf("webhook: build request: %w", err)), errorhandling.BlameDestination)
	}
	h := req.Header
	for k, v := range m.Headers {
		if err := checkHeader(k, v); err != nil {
			return nil, errorhandling.WithReason(errorhandling.Permanent(
				fmt.Errorf("webhook: message %s: %v", m.ID, err)), errorhandling.ReasonValidationFailure)
		}
		h.Set(k, v)
	}
	for k, v := range t.headers {
		h[k] = v
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", userAgent)
	}
	for k := range h {
		if isReserved(k) {
			delete(h, k)
		}
	}
	h.Set(HeaderMessageID, m.ID.String())
	if m.Stream != "" {
		h.Set(HeaderStream, m.Stream)
	}
	h.Set(HeaderType, m.Type)
	h.Set(HeaderAttempt, strconv.Itoa(transport.Attempt(m)))
	ts := strconv.FormatInt(t.clock.Now().Unix(), 10)
	h.Set(HeaderTimestamp, ts)
	if len(t.secrets) > 0 {
		h.Set(HeaderSignature, sign(t.secrets, ts, m.Payload))
	}
	return req, nil
}

// noResponse explains a request that got no response.
func (t *Transport) noResponse(ctx, dctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, which may hold a token
	}
	if ctx.Err() != nil {
		return fmt.Errorf("webhook: POST %s: %w", t.target, ctx.Err())
	}
	if dctx.Err() != nil {
		return errorhandling.WithReason(errorhandling.Transient(fmt.Errorf(
			"%w: POST %s: no response within %v: %w", ErrTimeout, t.target, t.timeout, context.DeadlineExceeded)),
			errorhandling.ReasonTimeoutExceeded)
	}
	err = errorhandling.Transient(fmt.Errorf("webhook: POST %s: %w", t.target, err))
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		err = errorhandling.WithReason(err, errorhandling.ReasonTimeoutExceeded)
	}
	return err
}

// Close releases the idle connections of the transport's own client;
// Deliver after Close fails with ErrClosed. Closing again does nothing.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	if t.ownClient {
		t.client.CloseIdleConnections()
	}
	return nil
}
