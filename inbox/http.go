package inbox

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/inbox/internal/headers"
	"github.com/backstophq/backstop/transport/webhook"
)

// HTTPConfig configures the HTTP receiver (HTTPHandler).
type HTTPConfig struct {
	// Secrets are the keys a request's Standard Webhooks signature is
	// checked against, as the sender's webhook transport holds them
	// ("whsec_<base64>" or raw bytes, see webhook.DecodeSecret). A
	// request passes when it verifies with any of them, so a receiver
	// rotating keys lists the old and the new. At least one is required.
	Secrets [][]byte
	// Tolerance is how far a request's webhook-timestamp may be from now.
	// Zero means webhook.DefaultTolerance (5 min).
	Tolerance time.Duration
	// MaxBody is the largest body accepted, in bytes, at most the inbox's
	// Limits.MaxPayloadBytes. Zero means Limits.MaxPayloadBytes.
	MaxBody int
	// Headers names the request headers kept with the message (in any
	// case). Nil means Content-Type only. The W3C trace context headers
	// (traceparent, tracestate) are kept as well, whatever Headers names:
	// a traceparent only when valid.
	Headers []string
	// Clock is the time the timestamps are checked against. Nil means the
	// inbox's clock.
	Clock clock.Clock
}

// The answers of the HTTP receiver.
const (
	// StatusStored answers a message stored for its handler.
	StatusStored = http.StatusAccepted
	// StatusDuplicate answers a message received before.
	StatusDuplicate = http.StatusOK
)

// HTTPHandler returns an http.Handler that receives messages sent by
// Backstop's webhook transport, or by any Standard Webhooks sender, into
// the inbox. Each POST must carry a valid signature (webhook-id,
// webhook-timestamp, webhook-signature): webhook-id is the message id
// (de-duplication key), the Backstop-Type header the type (else the
// "type" field of a JSON body, as Standard Webhooks payloads carry it),
// and Backstop-Stream the ordering key.
//
// It answers 202 Accepted once the message is stored, 200 OK for a
// duplicate, and writes nothing otherwise: 401 for a missing, bad or stale
// signature; 400 for a message without a type or that cannot be stored
// (ErrInvalid); 422 for an id received before with another type or body
// (ErrIDReused); 413 for a body over MaxBody (or over an http.MaxBytesReader
// the server installed); 408 for a body that did not
// arrive whole (the server's ReadTimeout, a broken connection); 405 for a
// method other than POST; 503 when the store fails (the sender tries
// again later). The webhook transport treats 2xx as delivered, 401, 408
// and 503 as faults of the destination (its messages wait), and 400, 413
// and 422 as faults of the message (dead-lettered on the sender's side).
//
// The inbox's DedupWindow must be at least twice the Tolerance: a signed
// request stays valid that long, and only its id's record stops a replay.
func (in *Inbox) HTTPHandler(cfg HTTPConfig) (http.Handler, error) {
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("%w: HTTPConfig.Secrets: at least one is required", ErrInvalidConfig)
	}
	for i, s := range cfg.Secrets {
		if _, err := webhook.DecodeSecret(s); err != nil {
			return nil, fmt.Errorf("%w: HTTPConfig.Secrets[%d]: %v", ErrInvalidConfig, i, err)
		}
	}
	if cfg.Tolerance < 0 {
		return nil, fmt.Errorf("%w: HTTPConfig.Tolerance must not be negative, got %s", ErrInvalidConfig, cfg.Tolerance)
	}
	// A signed request verifies while its timestamp is within the
	// tolerance either side of now, so for up to twice the tolerance
	// after it was first received; only its id's de-duplication record
	// stops a replay meanwhile. A shorter DedupWindow forgets the id
	// first, and a captured request replayed unchanged is stored and
	// handled again (the config file refuses such a source too).
	if tol := cmp.Or(cfg.Tolerance, webhook.DefaultTolerance); in.cfg.DedupWindow/2 < tol { // not 2*tol, which overflows for a tolerance over 146 years
		return nil, fmt.Errorf("%w: the inbox's DedupWindow (%s) is shorter than twice HTTPConfig.Tolerance (%s): a signed request could be replayed and stored again once its id was forgotten",
			ErrInvalidConfig, in.cfg.DedupWindow, tol)
	}
	if cfg.MaxBody < 0 {
		return nil, fmt.Errorf("%w: HTTPConfig.MaxBody must not be negative, got %d", ErrInvalidConfig, cfg.MaxBody)
	}
	if most := in.cfg.Limits.MaxPayloadBytes; cfg.MaxBody > most {
		// A body between the two would pass as a body and be refused as
		// a payload: a 400 where a body over the limit is a 413.
		return nil, fmt.Errorf("%w: HTTPConfig.MaxBody is %d, over the inbox's Limits.MaxPayloadBytes (%d)",
			ErrInvalidConfig, cfg.MaxBody, most)
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = in.cfg.Limits.MaxPayloadBytes
	}
	if cfg.Headers == nil {
		cfg.Headers = []string{"Content-Type"}
	}
	if cfg.Clock == nil {
		cfg.Clock = in.clk
	}
	return &httpReceiver{in: in, cfg: cfg, kept: keptNames(cfg.Headers)}, nil
}

type httpReceiver struct {
	in   *Inbox
	cfg  HTTPConfig
	kept []string // the headers kept: cfg.Headers and the trace context, each once
}

// keptNames are the request headers the receiver keeps: names, then the
// trace context headers, each name once in any case.
func keptNames(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, name := range slices.Concat(names, headers.TraceContext) {
		if c := headers.Canonical(name); !seen[c] {
			seen[c] = true
			out = append(out, name)
		}
	}
	return out
}

func (h *httpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "inbox: only POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(h.cfg.MaxBody)+1))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		// A limit of the server's own (http.MaxBytesReader, a
		// request-size middleware) under MaxBody: the body is too large
		// on every try, not one that did not arrive whole.
		http.Error(w, fmt.Sprintf("inbox: body over %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		// The body did not arrive whole: the server's ReadTimeout cut a
		// slow sender, or the connection broke. Nothing is wrong with the
		// message, so the answer is one a sender retries (a 400 would
		// have Backstop's webhook transport dead-letter it).
		http.Error(w, "inbox: the body did not arrive whole; send it again", http.StatusRequestTimeout)
		return
	}
	if len(body) > h.cfg.MaxBody {
		http.Error(w, fmt.Sprintf("inbox: body over %d bytes", h.cfg.MaxBody), http.StatusRequestEntityTooLarge)
		return
	}
	if err := h.verify(r.Header, body); err != nil {
		h.in.metrics.rejected("http")
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	msg := Received{
		ID: r.Header.Get(webhook.HeaderMessageID), Type: r.Header.Get(webhook.HeaderType),
		Stream: r.Header.Get(webhook.HeaderStream), Payload: body, Source: "http",
	}
	if msg.Type == "" {
		msg.Type = jsonType(body)
	}
	msg.Headers = h.keptHeaders(r)

	// A message without a type goes to Receive too, which refuses it
	// (ErrInvalid) but keeps it first as a dead letter: a sender without a
	// dead-letter queue of its own loses what is answered 400.
	dup, err := h.in.Receive(r.Context(), msg)
	switch {
	case errors.Is(err, ErrInvalid) && msg.Type == "":
		http.Error(w, "inbox: no message type (Backstop-Type header or a JSON body's \"type\")", http.StatusBadRequest)
	case errors.Is(err, ErrIDReused):
		// As an Idempotency-Key reused for another request is answered.
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	case errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		h.in.log.LogAttrs(r.Context(), slog.LevelWarn, "cannot store a received message",
			slog.String("source", "http"), slog.String("error", err.Error()))
		http.Error(w, "inbox: cannot store the message now", http.StatusServiceUnavailable)
	case dup:
		w.WriteHeader(StatusDuplicate)
	default:
		w.WriteHeader(StatusStored)
	}
}

// verify checks the signature against each secret in turn.
func (h *httpReceiver) verify(hdr http.Header, body []byte) error {
	now := h.cfg.Clock.Now()
	var err error
	for _, s := range h.cfg.Secrets {
		if err = webhook.Verify(s, hdr, body, now, h.cfg.Tolerance); err == nil {
			return nil
		}
		if !errors.Is(err, webhook.ErrSignatureMismatch) {
			return err // the same for every key
		}
	}
	return err
}

// jsonType returns the top-level "type" string of a JSON object body, or
// "".
func jsonType(body []byte) string {
	var v struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Type
}

// keptHeaders are the request's headers named in HTTPConfig.Headers that
// the message can carry. The signature covers the body, not the headers,
// so one that cannot be kept (invalid UTF-8, a control character, over
// the inbox's header limits: a proxy on the path may add such) is left out
// with a warning rather than answered 400, which would make the sender
// dead-letter a correctly signed message.
func (h *httpReceiver) keptHeaders(r *http.Request) map[string]string {
	kept := headers.Within(h.in.cfg.Limits)
	for _, name := range h.kept {
		if v := r.Header.Get(name); v != "" {
			kept.Add(name, v)
		}
	}
	if len(kept.Dropped) > 0 {
		h.in.log.LogAttrs(r.Context(), slog.LevelWarn, "received request headers left out: the message cannot carry them",
			slog.String("source", "http"), slog.Any("headers", headers.CleanNames(kept.Dropped)))
	}
	return kept.Headers
}
