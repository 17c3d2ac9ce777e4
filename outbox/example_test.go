package outbox_test

import (
	"errors"
	"fmt"

	"github.com/backstophq/backstop/outbox"
)

// A message with a newline in its stream key is refused with the field,
// the character and where it is.
func ExampleMessage_Validate() {
	m := &outbox.Message{Destination: "billing", Stream: "o\n42", Type: "order.created"}
	err := m.Validate()
	fmt.Println(err)

	var fe *outbox.FieldError
	fmt.Println(errors.Is(err, outbox.ErrInvalidMessage), errors.As(err, &fe) && fe.Field == "stream")
	// Output:
	// outbox: invalid message: stream holds control character U+000A at byte 1
	// true true
}

// Limits raise or lower the defaults; zero fields keep them.
func ExampleMessage_ValidateLimits() {
	m := &outbox.Message{Destination: "billing", Type: "invoice.pdf", Payload: make([]byte, 3<<20)}
	fmt.Println(m.Validate())
	fmt.Println(m.ValidateLimits(outbox.Limits{MaxPayloadBytes: 8 << 20}))
	// Output:
	// outbox: invalid message: payload is 3145728 bytes, over the limit of 1048576
	// <nil>
}

func ExampleCleanText() {
	fmt.Printf("%+q\n", outbox.CleanText("driver: bad byte \xff and a NUL \x00 here", 0))
	fmt.Printf("%q\n", outbox.CleanText("日本語のエラー", 3))
	// Output:
	// "driver: bad byte \ufffd and a NUL  here"
	// "日本語"
}
