package main

import (
	"testing"
	"time"
)

// TestDLQTimesAreAgo: a duration given to --after, --before or --since is
// a time ago whatever its sign. Before, "dlq delete --status resolved
// --before 720h", the natural way to write thirty days old, meant before
// thirty days from now: every resolved entry, the newest too.
func TestDLQTimesAreAgo(t *testing.T) {
	for _, v := range []string{"720h", "-720h"} {
		start := time.Now()
		f, err := (&dlqFilter{before: v, after: v}).filter()
		if err != nil {
			t.Fatalf("--before %s: %v", v, err)
		}
		for name, got := range map[string]*time.Time{"before": f.Before, "after": f.After} {
			if got == nil {
				t.Fatalf("--%s %s gave no time", name, v)
			}
			if lo, hi := start.Add(-720*time.Hour), time.Now().Add(-720*time.Hour); got.Before(lo) || got.After(hi) {
				t.Errorf("--%s %s = %s, want thirty days ago (%s)", name, v, got.Format(time.RFC3339), lo.Format(time.RFC3339))
			}
		}
		since, err := parseAgo(v)
		if err != nil || since.After(time.Now().Add(-719*time.Hour)) {
			t.Errorf("--since %s = %s, %v; want thirty days ago", v, since, err)
		}
	}
	at := "2026-01-02T15:04:05Z"
	f, err := (&dlqFilter{before: at}).filter()
	if err != nil || f.Before.Format(time.RFC3339) != at {
		t.Errorf("--before %s = %v, %v", at, f.Before, err)
	}
	if _, err := (&dlqFilter{before: "yesterday"}).filter(); err == nil {
		t.Error("--before yesterday: no error")
	}
}
