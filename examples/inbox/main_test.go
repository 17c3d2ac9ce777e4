package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
)

// TestRun runs the example against the test NATS server and checks its
// story: every order handled once, the re-published message dropped, the
// failed attempt retried, the unknown type dead-lettered.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), testenv.NATSURL(), &out, io.Discard)
	if errors.Is(err, errNoNATS) {
		testenv.Unreachable(t, "NATS JetStream at "+testenv.NATSURL(), testenv.NATSEnv, err)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"its relay published 6 to NATS",
		"inbox received 6, dropped 1 redelivered duplicate(s)",
		"handled 5, retried 1 failed attempt(s), dead-lettered 1",
		"wrote 5 shipments",
		"delivered 5 shipment requests",
		`no handler for message type "order.gift-wrapped"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
