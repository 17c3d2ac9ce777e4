package inboxtest

import "strings"

// Hostile is a message as a careless or hostile publisher sends it: an
// id, a type and a stream ("" for none) that a receiver must refuse
// rather than store.
type Hostile struct{ ID, Type, Stream string }

// Refused are messages that every source can carry and that no inbox
// stores: an id with a NUL, invalid UTF-8 or a C1 control, a type with a
// NUL. A source's test adds what only its own protocol can carry.
var Refused = []Hostile{
	{ID: "nul\x00id", Type: "order.created"},
	{ID: "bad\xffutf8", Type: "order.created"},
	{ID: "c1\u0085", Type: "order.created"},
	{ID: "bad-type", Type: "order\x00created"},
}

// QuotedID is an id that is odd but storable: it must reach the handler
// as it is, not break the SQL of the store it passes.
const QuotedID = "quote'; DROP TABLE handled; --"

// Header values that no message can carry: a receiver leaves such a
// header out and keeps the message.
var (
	NULValue  = "a\x00b"
	BadUTF8   = "\xff"
	HugeValue = strings.Repeat("v", 20000)
)
