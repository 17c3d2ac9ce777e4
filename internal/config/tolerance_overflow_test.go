package config

import (
	"strings"
	"testing"
)

// An http source's dedup_window must be at least twice its tolerance (a
// signed request verifies that long, and only its id stops a replay). A
// tolerance over 146 years overflowed twice it into a negative duration,
// so the check passed: tolerance: 1600000h took requests signed any time
// in 182 years either side of now, their ids forgotten after 168h.
func TestHugeToleranceDoesNotOverflowTheDedupWindowCheck(t *testing.T) {
	y := "destinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n" +
		"sources:\n  - inbox: in\n    type: http\n    path: /in\n    secret: 0123456789abcdef0123456789\n    tolerance: 1600000h\n    forward: {to: [w]}\n"
	_, err := Parse([]byte(y), env(nil))
	if err == nil || !strings.Contains(err.Error(), "sources[0].dedup_window:") {
		t.Fatalf("Parse = %v, want sources[0].dedup_window refused as shorter than twice the tolerance", err)
	}
}
