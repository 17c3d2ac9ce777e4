// Package rabbitmq delivers outbox messages to a RabbitMQ exchange with
// publisher confirms.
//
// Each message is published to Config.Exchange with a routing key (by
// default the message's type) and Deliver returns only once the broker
// has confirmed it (basic.ack). Messages are published persistent and
// mandatory by default: the broker writes them to disk in durable queues
// before confirming, and returns a message that no queue is bound to take
// instead of dropping it silently.
//
// The AMQP message id is the outbox message id; its type property is the
// message type. The header table carries Backstop-Message-Id,
// Backstop-Type, Backstop-Attempt and, when the message has a stream,
// Backstop-Stream (all strings), next to the message's own Headers
// (Backstop's names win over a message header of the same name). A
// message's headers that RabbitMQ acts on (CC and BCC, x-delay, x-match,
// x-death, x-dead-letter-*... see IsReservedHeader) are dropped unless
// Config.AllowReservedHeaders is set. RabbitMQ
// does not de-duplicate: a re-send after a crash arrives twice, and
// consumers de-duplicate by message id.
//
// # Connections and channels
//
// New dials the broker (so a bad URL, refused credentials or a TLS
// handshake that cannot succeed, such as a certificate no trusted
// authority signed, stop the program at start) and checks that the
// exchange exists. A broker that cannot be reached, or that hangs up
// during the login without refusing it, does not stop it: New warns and
// the deliveries dial again. One connection
// carries a small pool of channels, each in confirm mode and used by one
// Deliver at a time, so that confirms and returns are never shared. A
// channel the broker closes (a missing exchange) or whose Deliver did not
// finish cleanly (a timeout) is discarded; a connection on which a confirm
// did not come within Config.Timeout is dropped too (it may have gone
// silent), and a closed connection is dialed again by the next Deliver.
// Nothing reconnects in the background.
//
// # Failures
//
// Deliver's errors are marked for errorhandling's classifier, with the
// code Classification.Code reports:
//
//	failure                                    code               class, blame
//	no queue bound for the key (returned)      unroutable         transient, destination
//	exchange missing (404)                     not_found          transient, destination
//	access refused (403)                       access_refused     transient, destination
//	broker nack of a body no larger than one
//	its routing key took within the hour (a
//	full reject-publish queue)                 queue_full         transient, destination
//	other broker nack (a body over a queue's
//	x-max-length-bytes, or a full queue)       nack               transient, destination
//	broker blocks publishers (connection.
//	blocked: a memory or disk alarm)           blocked            transient, destination
//	no confirm within Config.Timeout           timeout            transient, destination
//	caller's context cancelled                 canceled           transient, destination
//	channel or connection closed               connection_closed  transient, destination
//	other broker exception                     amqp_<reply code>  transient, destination
//	broker unreachable, other I/O errors       (derived)          transient, destination
//	Deliver after Close                        closed             transient, destination
//	broker refused the content (406, such as
//	a body over max_message_size)              rejected           permanent, message
//	a message outbox validation refuses under
//	Config.Limits (a control character in its
//	stream or type, a header value with a line
//	break, a payload over 1 MiB by default);
//	routing key or header name over 255 bytes;
//	headers and properties over the broker's
//	frame_max (128 KiB by default)             invalid_message    permanent, message
//
// A message refused before publishing (invalid_message) also matches
// transport.ErrNotSent: nothing was learnt about the broker. The message's
// properties and header table travel in a single frame: a larger one would
// make the broker close the whole connection (FRAME_ERROR), failing every
// Deliver in flight on it, so it is refused instead. That matters only
// with Config.Limits.MaxHeaderBytes raised well over its 16 KiB default.
//
// An unroutable message is a fault of the destination's set-up, not of the
// message: no binding exists yet, or a binding was removed. It is transient
// and charged to the destination, so the destination's circuit breaker
// opens and no message uses up its attempts while an operator fixes the
// bindings. ErrUnroutable and ErrNacked let callers tell these cases apart.
//
// A nack carries no reason and AMQP cannot read a queue's arguments. The
// transport remembers, per routing key, the largest body the broker
// confirmed within the last hour: a nacked body no larger than that is not
// over any queue's x-max-length-bytes, so a queue full with x-overflow
// reject-publish refused it for lack of room (queue_full). Its error also
// matches transport.ErrNoRoom, and the relay never singles such a message
// out: a congested queue whose consumer takes a message now and then is
// the destination's outage, for which no message is charged an attempt,
// however long it lasts. Another nack's error names the usual causes with
// the size of the body, which is what x-max-length-bytes counts. A message
// larger than the queue's x-max-length-bytes is nacked for good while the
// queue takes the others: the relay singles it out (relay's
// Destination.SingledOutAfter, 15 minutes by default), charges its
// further faults as attempts, and parks it in the dead-letter queue with
// that error. (The first nacks of a full queue, before it took a message
// of that size, are plain nacks; a queue's byte limit lowered within the
// hour makes a message over it look like a full queue's until the hour
// has passed.) A nack does not say which queue refused: a message the
// exchange routes to several queues, one of them full, is nacked though
// the others took it, and each retry adds another copy to them until the
// full queue has room. AMQP offers no way to publish to some of the
// queues only; consumers de-duplicate by message id, or each queue gets
// its own destination (an exchange or routing key of its own).
//
// A broker under a memory or disk alarm blocks publishers: it tells a
// connection so (connection.blocked) once the connection publishes, and
// stops reading it. The Deliver that met the block fails as soon as the
// broker says so (its message may be enqueued once the alarm clears), and
// later ones fail at once without publishing, all as blocked; the
// connection is kept, and publishes again once the broker unblocks it.
// A broker or proxy that stops reading without saying so is not waited
// for either: each Deliver still returns within Config.Timeout, as a
// timeout of the destination (whether it was opening a channel, writing
// the message or waiting for its confirm), and a connection that stopped
// taking writes is dropped and dialled again by the next Deliver; Close
// does not wait for the broker longer than Timeout. With AllowUnroutable, an unroutable message is
// confirmed and lost; without it (the default) it is never lost.
//
// # Usage
//
//	tr, err := rabbitmq.New(rabbitmq.Config{
//		URL:        "amqp://guest:guest@127.0.0.1:5672/",
//		Exchange:   "orders",
//		RoutingKey: "{destination}.{type}", // or RoutingKeyFunc
//	})
//	if err != nil {
//		return err
//	}
//	defer tr.Close()
//	err = tr.Deliver(ctx, msg) // nil once the broker confirmed msg
package rabbitmq
