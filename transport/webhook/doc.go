// Package webhook delivers messages as HTTP POST requests signed as the
// Standard Webhooks specification (https://www.standardwebhooks.com) says:
// the webhook transport.
//
// Each message is one request to Config.URL. The body is the message's
// payload as is; the Content-Type is the message's Content-Type header,
// or application/json. The message's headers, then Config.Headers, are
// sent as HTTP headers, and the transport adds:
//
//	webhook-id         the message id (de-duplicate on it: delivery is at least once)
//	webhook-timestamp  the time of sending, in Unix seconds
//	webhook-signature  v1,<base64 HMAC-SHA256>, one per secret, space-separated; when Config.Secret is set
//	Backstop-Stream    the message's stream, when it has one
//	Backstop-Type      the message's type, such as order.created
//	Backstop-Attempt   1 for the first delivery attempt, 2 for the next...
//
// # What the answers mean
//
// A 2xx answer means delivered. Otherwise whom a failure is blamed on
// decides what happens to the message (Transport.Deliver lists every
// case, and Config.StatusOverrides changes them per destination):
//
//	answer                                    fault               the relay
//	3xx, 401 403 404 405 410 421,             transient,          retries later; the message keeps its
//	408 423 425 429, 5xx, 1xx as final,       the destination's   attempts; the destination's breaker
//	timeouts, refused connections, DNS, TLS                       counts it; Retry-After is honoured
//	413 with a Retry-After                    transient,          retries it after the Retry-After,
//	                                          the message's       charging an attempt
//	400 413 415 422, other 4xx                permanent,          dead-letters it at once
//	                                          the message's
//	a message HTTP cannot carry or over       permanent,          dead-letters it at once, without
//	Config.Limits                             the message's       sending anything
//
// A 401 or 403 is a credential that stopped working, a 404, 405 or 410 a
// route that is wrong, a 421 a host that serves another name: every
// message would fail alike, and none of them is at fault. A 423 (locked)
// is taken for a state of the destination that passes, as a 425 is. A 402
// stays the message's: an API such as a payment provider's answers it for
// one request (a card declined).
//
// # Verifying a request
//
// The signature is
//
//	base64(HMAC-SHA256(key, webhook-id + "." + webhook-timestamp + "." + body))
//
// over the exact bytes of the body, prefixed "v1,". The key is the secret
// decoded from its "whsec_<base64>" form (DecodeSecret). While the sender
// rotates keys the header holds several signatures separated by spaces,
// and a request is genuine when any of them verifies. A receiver in Go
// wraps its handler with RequireSignature, or calls VerifyRequest or
// Verify; one in another language uses its Standard Webhooks library,
// which checks the same and rejects timestamps more than five minutes
// away, so that a captured request cannot be replayed later.
// VerifyRequest and RequireSignature read at most MaxVerifyBody (1 MiB),
// the sender's default payload limit. See ExampleVerify and
// ExampleRequireSignature.
package webhook
