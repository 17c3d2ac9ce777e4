// Package webhook delivers messages as HTTP POST requests: the webhook
// transport.
//
// Each message is one request to Config.URL. The body is the message's
// payload as is; the Content-Type is the message's Content-Type header,
// or application/json. The message's headers, then Config.Headers, are
// sent as HTTP headers, and the transport adds:
//
//	Backstop-Message-Id  the message id (de-duplicate on it: delivery is at least once)
//	Backstop-Stream      the message's stream, when it has one
//	Backstop-Type        the message's type, such as order.created
//	Backstop-Attempt     1 for the first delivery attempt, 2 for the next...
//	Backstop-Timestamp   the time of sending, in Unix seconds
//	Backstop-Signature   v1=<hex HMAC-SHA256>, when Config.Secret is set
//
// A 2xx answer means delivered. What other answers mean, and whom they are
// blamed on, is listed at Transport.Deliver: in short, 408, 425, 429, 5xx
// and network failures are transient faults of the destination (retried,
// honouring Retry-After, without burning the message's attempts), other
// 4xx permanent faults of the message (dead-lettered).
//
// # Verifying a request
//
// The signature is
//
//	hex(HMAC-SHA256(secret, Backstop-Timestamp + "." + body))
//
// over the exact bytes of the body, prefixed "v1=". While the sender
// rotates keys the header holds several signatures separated by commas,
// and a request is genuine when any of them verifies. A receiver in Go
// wraps its handler with RequireSignature, or calls VerifyRequest or
// Verify; one in another language recomputes the HMAC, compares it in
// constant time, and rejects timestamps more than a few minutes old, so
// that a captured request cannot be replayed later. See ExampleVerify and
// ExampleRequireSignature.
package webhook
