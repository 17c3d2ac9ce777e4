package natstransport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport"
)

// JetStream API error codes that classify sees apart from their HTTP-like
// status.
const (
	errCodeMessageTooLarge = 10054 // message size exceeds maximum allowed
	errCodeHeaderTooLarge  = 10097 // header size exceeds maximum allowed
	errCodeStreamNotMatch  = 10060 // expected stream does not match
	errCodeStreamSealed    = 10109 // invalid operation on sealed stream
	errCodeMaxBytes        = 10077 // maximum bytes exceeded (discard new)
	// nats-server 2.11+: 4xx answers that say nothing of the message.
	errCodeDuplicateInProcess = 10158 // 409: a clustered stream is still proposing the same Nats-Msg-Id
	errCodeTooManyRequests    = 10167 // 429: the stream's ingest buffer is full
	// The account's side, each refusing every message alike.
	errCodeAccountResources     = 10002 // resource limits exceeded for account
	errCodeNotEnabledForAccount = 10039 // JetStream not enabled for account
	errCodeJetStreamNotEnabled  = 10076 // JetStream not enabled
)

// classify marks a failed publish with its fault class, blame, reason and
// code, as the package documentation's table says. ctx is the caller's
// context: when it is done, the error also wraps ctx.Err().
func classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return transport.DestinationFault(fmt.Errorf("%w (no JetStream stream captures the subject)", err),
			errorhandling.ReasonTransportUnavailable, "no_stream")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return transport.DestinationFault(err, errorhandling.ReasonTimeoutExceeded, "timeout")
	case errors.Is(err, context.Canceled):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "canceled")
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrInvalidConnection), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, nats.ErrReconnectBufExceeded):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "connection_closed")
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		// Dialing again after the client closed the connection: a
		// credential that stopped working is the destination's to fix.
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "unauthorized")
	case errors.Is(err, nats.ErrMaxPayload):
		// The client refuses a message over the server's max_payload
		// before writing anything: nothing was learnt about the server,
		// which may well be down (the client checks against the
		// max_payload it last heard of), so the breaker must not count it.
		return transport.Unsendable(err, errorhandling.ReasonValidationFailure, "message_too_large")
	case errors.Is(err, nats.ErrBadSubject):
		return transport.Unsendable(err, errorhandling.ReasonValidationFailure, "invalid_message")
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return transport.MessageFault(err, errorhandling.ReasonValidationFailure, "invalid_message")
	case errors.As(err, &apiErr):
		return classifyAPIError(err, apiErr)
	}
	// Anything else (a malformed PubAck, an I/O error): when either party
	// could be at fault, the destination is blamed.
	return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "")
}

// classifyAPIError sorts the errors JetStream answers a publish with.
func classifyAPIError(err error, apiErr *jetstream.APIError) error {
	code := fmt.Sprintf("jetstream_%d", apiErr.ErrorCode)
	switch apiErr.ErrorCode {
	case errCodeMessageTooLarge, errCodeHeaderTooLarge:
		return transport.MessageFault(err, errorhandling.ReasonValidationFailure, "message_too_large")
	case errCodeStreamNotMatch, errCodeStreamSealed, errCodeAccountResources, errCodeNotEnabledForAccount,
		errCodeJetStreamNotEnabled, errCodeDuplicateInProcess, errCodeTooManyRequests:
		// Every message would be refused alike: a full account quota
		// dead-lettered a whole backlog when it was the message's fault.
		// A re-send whose first publish a clustered stream is still
		// proposing (10158) is landing: the next try is acknowledged as
		// a duplicate.
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, code)
	}
	if apiErr.ErrorCode == errCodeMaxBytes && strings.HasPrefix(apiErr.Description, "maximum messages") {
		// A stream at its MaxMsgs, or a subject at its MaxMsgsPerSubject,
		// with a discard-new policy: the stream has no room for any
		// message, which it takes once its consumers (a work queue) made
		// some. The relay never singles such a message out.
		return transport.NoRoom(err, errorhandling.ReasonTransportUnavailable, "stream_full")
	}
	if apiErr.Code == 409 || apiErr.Code == 429 {
		// A conflict with a request in flight, or the server shedding
		// load: nothing about what the message carries.
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, code)
	}
	if apiErr.Code >= 400 && apiErr.Code < 500 {
		// A request JetStream refuses for what it carries: the Nats-*
		// headers a message brought (an expected sequence, a TTL).
		return transport.MessageFault(err, errorhandling.ReasonValidationFailure, code)
	}
	// 5xx: the stream is full (maximum messages or bytes exceeded, with a
	// discard-new policy), out of resources or without a leader.
	return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, code)
}

// storeOverhead is what a JetStream memory store adds to a message's
// subject, headers and payload when it counts the bytes it holds.
const storeOverhead = 16

// maxBytes tells a message larger than its whole stream apart from a full
// stream. Both are refused with "maximum bytes exceeded" when the stream
// discards new messages, and a full stream is the destination's fault, to
// wait out; but a message larger than the stream's max_bytes would be
// refused for ever, and as a transient fault it was retried for ever. On
// that refusal, maxBytes reads the stream's limit and state (one request,
// only on this error) and returns a permanent fault blamed on the message
// when the message cannot fit even in the empty stream, and a fault of the
// destination matching transport.ErrNoRoom (stream_full) when it can, the
// stream being full; otherwise (another error, or the limit could not be
// read) nil, the error then classified as it is.
//
// Servers count a message against max_bytes differently: every store
// counts at least its headers and payload (the file store, and the memory
// store of nats-server 2.9, no more), and the memory store of later
// servers its subject and 16 bytes too. A message over the limit by the
// least count fits no stream; one under it by the most fits any. Between
// the two it depends on the server: such a message is found too large
// only when the stream that refused it is empty, and the stream is taken
// as full otherwise. It was found too large whenever its subject, headers,
// payload and 16 bytes were over the limit, and a message that a 2.9
// server takes once the stream has room was dead-lettered as
// message_too_large while the stream was merely full.
func maxBytes(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeMaxBytes || !strings.HasPrefix(apiErr.Description, "maximum bytes") {
		return nil
	}
	name, lerr := js.StreamNameBySubject(ctx, msg.Subject)
	if lerr != nil {
		return nil
	}
	st, lerr := js.Stream(ctx, name)
	if lerr != nil {
		return nil
	}
	info := st.CachedInfo()
	limit := info.Config.MaxBytes
	if limit <= 0 {
		return nil
	}
	least := int64(headerLen(msg.Header) + len(msg.Data))
	most := least + int64(len(msg.Subject)) + storeOverhead
	if least < limit && (most < limit || info.State.Msgs > 0) {
		return transport.NoRoom(fmt.Errorf("%w (stream %s is full: it holds at most %d bytes, and the message takes about %d)", err, name, limit, most),
			errorhandling.ReasonTransportUnavailable, "stream_full")
	}
	size := least // over the limit by any count
	if least < limit {
		size = most // over it by this server's, which refused it in the empty stream
	}
	return transport.MessageFault(fmt.Errorf("%w (the message takes at least %d bytes; stream %s holds at most %d)", err, size, name, limit),
		errorhandling.ReasonValidationFailure, "message_too_large")
}

// headerLen is the length of h as the NATS protocol writes it.
func headerLen(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
