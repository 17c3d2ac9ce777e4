package main

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// An AMQP header holding an integer is an ordering key, in decimal: it
// gave no key, and its messages went unordered without a word.
func TestTableHeaderTakesIntegers(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{"42", "42"}, {int8(-4), "-4"}, {int16(42), "42"}, {int32(42), "42"}, {int64(1 << 40), "1099511627776"},
		{uint8(7), "7"}, {uint16(42), "42"}, {uint32(42), "42"}, {uint64(42), "42"}, {3.5, ""}, {true, ""}, {[]byte("x"), ""},
	} {
		v, want := c.v, c.want
		if got := tableHeader(amqp.Table{"X-Account-Id": v}, "x-account-id"); got != want {
			t.Errorf("header %T %v: %q, want %q", v, v, got, want)
		}
	}
}
