package transport_test

import (
	"errors"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport"
)

func TestFaultMarkers(t *testing.T) {
	base := errors.New("broker said no")
	c := errorhandling.NewErrorClassifier()

	v := c.Classify(transport.DestinationFault(base, errorhandling.ReasonTransportUnavailable, "nack"))
	if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination ||
		v.Reason != errorhandling.ReasonTransportUnavailable || v.Code != "nack" {
		t.Errorf("DestinationFault classified as %+v", v)
	}
	v = c.Classify(transport.MessageFault(base, errorhandling.ReasonSerializationError, ""))
	if v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage ||
		v.Reason != errorhandling.ReasonSerializationError {
		t.Errorf("MessageFault classified as %+v", v)
	}
	if !errors.Is(transport.MessageFault(base, errorhandling.ReasonValidationFailure, "x"), base) {
		t.Error("MessageFault hides the original error")
	}
	if transport.DestinationFault(nil, 0, "") != nil || transport.MessageFault(nil, 0, "") != nil {
		t.Error("a nil error must stay nil")
	}
}

// Unsendable is a message's permanent fault whose error also says that
// nothing was sent, with err's text.
func TestUnsendable(t *testing.T) {
	base := errors.New("header Host is managed by HTTP")
	err := transport.Unsendable(base, errorhandling.ReasonValidationFailure, "invalid_message")
	if !errors.Is(err, transport.ErrNotSent) || !errors.Is(err, base) || err.Error() != base.Error() {
		t.Fatalf("Unsendable = %v: want ErrNotSent and base matched, base's text", err)
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage || v.Code != "invalid_message" {
		t.Fatalf("verdict %+v: want permanent, the message's, code invalid_message", v)
	}
	if errors.Is(transport.MessageFault(base, errorhandling.ReasonValidationFailure, ""), transport.ErrNotSent) {
		t.Fatal("MessageFault matches ErrNotSent")
	}
	if transport.Unsendable(nil, errorhandling.ReasonValidationFailure, "") != nil {
		t.Fatal("Unsendable(nil) is not nil")
	}
}

// NoRoom is a destination's transient fault whose error also says that
// the destination lacked room, with err's text.
func TestNoRoom(t *testing.T) {
	base := errors.New("queue full")
	err := transport.NoRoom(base, errorhandling.ReasonTransportUnavailable, "queue_full")
	if !errors.Is(err, transport.ErrNoRoom) || !errors.Is(err, base) || err.Error() != base.Error() {
		t.Fatalf("NoRoom = %v: want ErrNoRoom and base matched, base's text", err)
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination || v.Code != "queue_full" {
		t.Fatalf("verdict %+v: want transient, the destination's, code queue_full", v)
	}
	if errors.Is(transport.DestinationFault(base, errorhandling.ReasonTransportUnavailable, ""), transport.ErrNoRoom) {
		t.Fatal("DestinationFault matches ErrNoRoom")
	}
	if transport.NoRoom(nil, errorhandling.ReasonTransportUnavailable, "") != nil {
		t.Fatal("NoRoom(nil) is not nil")
	}
}
