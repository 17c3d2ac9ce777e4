package rabbitmq

import "strings"

// The headers every published message carries.
const (
	HeaderMessageID = "Backstop-Message-Id"
	HeaderStream    = "Backstop-Stream"
	HeaderType      = "Backstop-Type"
	HeaderAttempt   = "Backstop-Attempt"
)

// isBackstopHeader reports whether name is one of the headers the
// transport sets, in any case: a message header so named is dropped, since
// AMQP table keys are case-sensitive and "backstop-message-id: forged"
// travelled beside the real Backstop-Message-Id for a consumer that
// matches names in any case to read.
func isBackstopHeader(name string) bool {
	for _, b := range [...]string{HeaderMessageID, HeaderStream, HeaderType, HeaderAttempt} {
		if strings.EqualFold(name, b) {
			return true
		}
	}
	return false
}

// reservedHeaders are the headers RabbitMQ or its common plugins act on
// when a message carries them, in lower case: CC and BCC add routing keys
// (sender-selected distribution), x-delay delays it (delayed-message
// exchange), x-match changes a headers exchange's matching,
// x-deduplication-header de-duplicates it (message-deduplication plugin),
// x-stream-filter-value filters it on a stream, x-received-from stops
// federation, and x-death, x-delivery-count and the x-first-death-*,
// x-last-death-* and x-dead-letter-* headers describe or steer
// dead-lettering and redelivery limits.
var reservedHeaders = map[string]bool{
	"cc": true, "bcc": true, "x-delay": true, "x-match": true, "x-deduplication-header": true,
	"x-stream-filter-value": true, "x-received-from": true, "x-death": true, "x-delivery-count": true,
}

// reservedPrefixes start the names of reserved header families.
var reservedPrefixes = []string{"x-first-death-", "x-last-death-", "x-dead-letter-"}

// IsReservedHeader reports whether name (in any case) is a header
// RabbitMQ reserves: CC, BCC, x-delay, x-match, x-deduplication-header,
// x-stream-filter-value, x-received-from, x-death, x-delivery-count, and
// those starting with x-first-death-, x-last-death- or x-dead-letter-.
// Other x- headers, such as X-Tenant, are the application's. Unless
// Config.AllowReservedHeaders is set, a message's reserved headers are
// dropped.
func IsReservedHeader(name string) bool {
	lower := strings.ToLower(name)
	if reservedHeaders[lower] {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	return false
}
