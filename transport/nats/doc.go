// Package natstransport delivers outbox messages to NATS JetStream.
//
// The package lives in directory transport/nats but is named natstransport,
// so that it and the NATS client (package nats) can be imported side by
// side without an alias.
//
// Each message is published to a subject (by default
// "backstop.<destination>.<type>") and Deliver returns only once JetStream
// has stored it and sent its PubAck. The message id travels as Nats-Msg-Id,
// so JetStream drops a re-send of the same message inside the stream's
// duplicate window: a re-send after a crash is acknowledged as a duplicate
// and Deliver reports success without storing the message twice.
//
// Every message carries the headers Backstop-Message-Id, Backstop-Type,
// Backstop-Attempt and, when it has a stream, Backstop-Stream, next to its
// own Headers (Backstop's names win over a message header of the same
// name). A message's headers whose names start with "Nats-" (in any case:
// Nats-Expected-Last-Sequence, Nats-Rollup, Nats-TTL...) are dropped,
// because JetStream acts on them; Config.AllowReservedHeaders lets them
// through, except Nats-Msg-Id, which is always the message id.
//
// # Failures
//
// Deliver's errors are marked for errorhandling's classifier, with the
// code Classification.Code reports:
//
//	failure                                      code               class, blame
//	no stream captures the subject               no_stream          transient, destination
//	no PubAck within Config.Timeout              timeout            transient, destination
//	the stream is configured with no_ack         no_ack             transient, destination
//	caller's context cancelled                   canceled           transient, destination
//	connection closed, draining or reconnecting  connection_closed  transient, destination
//	credential refused when dialing again        unauthorized       transient, destination
//	the user may not publish to the subject, or
//	receive PubAcks (subscribe to its inbox)     permission_denied  transient, destination
//	a stream other than Config.Stream took it    jetstream_10060    transient, destination
//	sealed stream                                jetstream_10109    transient, destination
//	stream ingest buffer full (429), same
//	Nats-Msg-Id still in process (409)           jetstream_<code>   transient, destination
//	stream or subject at its maximum messages,
//	or stream at its maximum bytes with a
//	message that fits it empty (discard-new
//	policy)                                      stream_full        transient, destination
//	other 5xx                                    jetstream_<code>   transient, destination
//	anything else                                (derived)          transient, destination
//	a message outbox validation refuses under
//	Config.Limits (a control character in its
//	stream or type, a header name that is not a
//	token, a header value with a line break, a
//	payload over 1 MiB by default); a stream,
//	type or header value that starts or ends
//	with a blank; an empty payload with a
//	Status header                                invalid_message    permanent, message
//	message larger than the stream or the
//	server allow (a stream's max_msg_size; its
//	whole max_bytes, with a discard-new policy)  message_too_large  permanent, message
//	invalid subject (an empty or wildcard
//	token, white space, over MaxSubjectLen)      invalid_subject    permanent, message
//	other JetStream 4xx (such as a message's
//	own Nats-Expected-* header not met)          jetstream_<code>   permanent, message
//
// A stream that discards old messages (JetStream's default) acknowledges a
// message larger than its whole max_bytes and drops it at once (nats-server
// 2.9): the ack is all a publisher sees, and the message is recorded
// delivered. A max_msg_size below max_bytes, or a discard-new policy, makes
// the server refuse it, and the message is dead-lettered.
//
// The NATS client trims the blanks (spaces, tabs) that start or end a
// header value as it publishes: a message whose stream, type or header
// value starts or ends with one would reach consumers altered, and is
// refused instead, as the webhook transport refuses it.
//
// NATS clients take a message with an empty payload and a Status header
// for a status message of the server (nats.go's JetStream consumers drop
// it, or stop on "Status: 400"), so no consumer would ever receive it:
// such a message is refused, dead-lettered with a reason saying so.
//
// A message refused before anything was written (invalid_message,
// invalid_subject, and message_too_large when the client itself refuses a
// message over the server's max_payload) also matches transport.ErrNotSent:
// nothing was learnt about the server, so the relay's breaker does not
// count it.
//
// The connection the Transport dials reconnects forever while the server
// is away. The client closes it for good on a few errors (a credential
// refused twice in a row while reconnecting, an -ERR from the server): the
// next Deliver then dials again, so that the destination recovers once the
// server takes the Transport again. A Deliver made while the connection is
// away fails at once (connection_closed): the client keeps no publish to
// write once it is back, after the relay has released the message. A
// PubAck that does not come within Config.Timeout has the server pinged;
// a connection that does not answer either (gone silent: a NAT entry or a
// load balancer dropped it without a reset) reconnects at once, rather
// than when the client's own pings notice it minutes later.
//
// The server answers a publish its user may not make with an
// asynchronous permissions violation and no PubAck: Deliver fails as soon
// as the violation arrives (permission_denied), rather than after
// Config.Timeout, since the user's permissions are the destination's to
// fix, as a webhook's 403 is. A user that may publish but not subscribe to
// the inbox PubAcks come to (_INBOX.> by default) has its messages stored
// and never acknowledged: once the server refused the inbox, Deliver fails
// without publishing, so that retries do not store a copy each, and the
// connection subscribes again (reconnecting) at most once per
// Config.Timeout until the server takes the subscription. Both need the
// connection the Transport dials: one passed in Config.Conn reports its
// violations to its owner, and such publishes time out.
//
// A stream configured with no_ack stores what is published and never
// answers with a PubAck: no delivery to it can succeed, and each retry
// would store another copy of the message. Once a PubAck has not come,
// the stream capturing the subject is read in the background; a Deliver
// to a no_ack stream then fails without publishing (no_ack), the stream
// being read again at most once per Config.Timeout, until no_ack is
// turned off.
//
// A stream_full error also matches transport.ErrNoRoom: a count limit is
// never about the message, nor is a byte limit the message fits within
// (read from the stream on that refusal), and the relay never singles such a message
// out (relay's Destination.SingledOutAfter), however long a work-queue
// stream whose consumers take a message now and then stays full.
//
// A subject no stream captures is a misconfiguration of the destination,
// not a fault of the message: it is transient and charged to the
// destination, so the destination's circuit breaker opens and messages keep
// their attempts while an operator creates or fixes the stream.
//
// # Usage
//
//	tr, err := natstransport.New(natstransport.Config{
//		URL:     "nats://127.0.0.1:4222",
//		Subject: "orders.{type}", // or SubjectFunc
//		Stream:  "ORDERS",        // optional: checked at New
//	})
//	if err != nil {
//		return err
//	}
//	defer tr.Close()
//	err = tr.Deliver(ctx, msg) // nil once JetStream acknowledged msg
package natstransport
