package headers

import (
	"slices"
	"testing"
)

func TestKeptCanonicalisesAndKeepsTheFirst(t *testing.T) {
	var k Kept
	k.Add("x-trace", "a")
	k.Add("X-Trace", "b") // the same name in another case
	k.Add("bad", "line\nbreak")
	k.Add("Invalid", "\xff")
	if got := k.Headers["X-Trace"]; got != "a" || len(k.Headers) != 1 {
		t.Fatalf("headers = %v, want only X-Trace: a", k.Headers)
	}
	if want := []string{"X-Trace", "bad", "Invalid"}; !slices.Equal(k.Dropped, want) {
		t.Fatalf("dropped = %q, want %q", k.Dropped, want)
	}
}

func TestKeptStaysWithinItsBounds(t *testing.T) {
	k := Kept{MaxHeaders: 2, MaxBytes: 20}
	k.Add("A", "1234567")        // 8 bytes
	k.Add("B", "12345678901234") // 15 more: over 20
	k.Add("C", "1")              // 2 more: fits
	k.Add("D", "1")              // a third header: over the count
	if len(k.Headers) != 2 || k.Headers["A"] == "" || k.Headers["C"] == "" {
		t.Fatalf("headers = %v, want A and C", k.Headers)
	}
	if want := []string{"B", "D"}; !slices.Equal(k.Dropped, want) {
		t.Fatalf("dropped = %q, want %q", k.Dropped, want)
	}
}

func TestCleanNamesMakesNamesValidText(t *testing.T) {
	got := CleanNames([]string{"ok", "a\x00b\xff"})
	if got[0] != "ok" || got[1] != "ab\ufffd" {
		t.Fatalf("CleanNames = %q", got)
	}
}

func TestHasPrefixFold(t *testing.T) {
	for s, want := range map[string]bool{"Backstop-Id": true, "BACKSTOP-": true, "back": false, "xbackstop-": false} {
		if HasPrefixFold(s, "backstop-") != want {
			t.Errorf("HasPrefixFold(%q) = %v", s, !want)
		}
	}
}

// The trace context headers are kept under their W3C names whatever the
// case a source sent them in (nats.Header and AMQP tables are
// case-sensitive: a consumer reads "traceparent"), and a malformed
// traceparent is left out.
func TestKeptKeepsTheTraceContextUnderItsW3CNames(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var k Kept
	k.Add("TRACEPARENT", tp)
	k.Add("Tracestate", "congo=t61rcWkgMzE")
	if k.Headers["traceparent"] != tp || k.Headers["tracestate"] != "congo=t61rcWkgMzE" || len(k.Headers) != 2 {
		t.Fatalf("headers = %q, want traceparent and tracestate", k.Headers)
	}
	var bad Kept
	bad.Add("traceparent", "00-not-a-trace")
	if len(bad.Headers) != 0 || !slices.Equal(bad.Dropped, []string{"traceparent"}) {
		t.Fatalf("headers = %q, dropped %q: want the malformed traceparent dropped", bad.Headers, bad.Dropped)
	}
}
