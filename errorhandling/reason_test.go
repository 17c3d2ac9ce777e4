package errorhandling_test

import (
	"strconv"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
)

// TestReasonValues pins the numbers stored in the failure_reason column.
func TestReasonValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    eh.FailureReason
		n    int
		name string
	}{
		{eh.ReasonTransportUnavailable, 1, "TransportUnavailable"},
		{eh.ReasonHandlerException, 2, "HandlerException"},
		{eh.ReasonValidationFailure, 3, "ValidationFailure"},
		{eh.ReasonTimeoutExceeded, 4, "TimeoutExceeded"},
		{eh.ReasonSerializationError, 5, "SerializationError"},
		{eh.ReasonDependencyFailure, 6, "DependencyFailure"},
		{eh.ReasonPoisonMessage, 7, "PoisonMessage"},
		{eh.ReasonUnknown, 99, "Unknown"},
	}
	if len(eh.Reasons) != len(tests) {
		t.Fatalf("Reasons has %d entries, want %d", len(eh.Reasons), len(tests))
	}
	for i, tt := range tests {
		if int(tt.r) != tt.n {
			t.Errorf("%s = %d, want %d", tt.name, int(tt.r), tt.n)
		}
		if tt.r.String() != tt.name {
			t.Errorf("FailureReason(%d).String() = %q, want %q", tt.n, tt.r.String(), tt.name)
		}
		if eh.Reasons[i] != tt.r {
			t.Errorf("Reasons[%d] = %v, want %v", i, eh.Reasons[i], tt.r)
		}
	}
	if got := eh.FailureReason(42).String(); got != "FailureReason(42)" {
		t.Errorf("String of an undefined reason = %q", got)
	}
}

func TestParseFailureReason(t *testing.T) {
	t.Parallel()
	for _, r := range eh.Reasons {
		for _, s := range []string{r.String(), strconv.Itoa(int(r))} {
			got, err := eh.ParseFailureReason(s)
			if err != nil || got != r {
				t.Errorf("ParseFailureReason(%q) = %v, %v; want %v", s, got, err, r)
			}
		}
	}
	for _, s := range []string{"", "unknown", "transportunavailable", "0", "8", "100", " 1", "Timeout"} {
		if got, err := eh.ParseFailureReason(s); err == nil {
			t.Errorf("ParseFailureReason(%q) = %v, want an error", s, got)
		}
	}
}

func TestDefaultClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r     eh.FailureReason
		class eh.Class
		blame eh.Blame
	}{
		{eh.ReasonTransportUnavailable, eh.ClassTransient, eh.BlameDestination},
		{eh.ReasonHandlerException, eh.ClassUnknown, eh.BlameMessage},
		{eh.ReasonValidationFailure, eh.ClassPermanent, eh.BlameMessage},
		{eh.ReasonTimeoutExceeded, eh.ClassTransient, eh.BlameDestination},
		{eh.ReasonSerializationError, eh.ClassPermanent, eh.BlameMessage},
		{eh.ReasonDependencyFailure, eh.ClassTransient, eh.BlameDestination},
		{eh.ReasonPoisonMessage, eh.ClassPermanent, eh.BlameMessage},
		{eh.ReasonUnknown, eh.ClassUnknown, eh.BlameMessage},
	}
	for _, tt := range tests {
		if c, b := tt.r.DefaultClass(); c != tt.class || b != tt.blame {
			t.Errorf("%v.DefaultClass() = %v, %v; want %v, %v", tt.r, c, b, tt.class, tt.blame)
		}
	}
}

func TestClassAndBlameStrings(t *testing.T) {
	t.Parallel()
	for v, want := range map[interface{ String() string }]string{
		eh.ClassUnknown:        "unknown",
		eh.ClassRecognised:     "recognised",
		eh.ClassTransient:      "transient",
		eh.ClassPermanent:      "permanent",
		eh.Class(9):            "class(9)",
		eh.BlameDestination:    "destination",
		eh.BlameMessage:        "message",
		eh.Blame(7):            "blame(7)",
		eh.FailureReason(1000): "FailureReason(1000)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
