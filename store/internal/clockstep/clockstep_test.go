package clockstep

import (
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	var w Watch
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if !w.Back(t0) {
		t.Error("the first reading is not taken as a step")
	}
	if w.Back(t0.Add(time.Second)) {
		t.Error("a reading a second on is taken as a step back")
	}
	if w.Back(t0.Add(time.Hour)) {
		t.Error("a step forward is taken as a step back")
	}
	if w.Back(t0.Add(time.Hour - Slack/2)) {
		t.Error("a reading within the slack is taken as a step back")
	}
	if !w.Back(t0) {
		t.Error("a step back an hour is not seen")
	}
	if w.Back(t0) {
		t.Error("the same reading again is taken as another step")
	}
}

func TestForward(t *testing.T) {
	var mono time.Duration
	f := NewForward(func() time.Duration { return mono })
	if _, ok := f.Expect(); ok {
		t.Fatal("an expectation before any reading")
	}
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	f.Saw(t0, f.Mono())
	mono += 3 * time.Second
	if got, ok := f.Expect(); !ok || !got.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("expect = %v %v, want %v", got, ok, t0.Add(3*time.Second))
	}
	f.Saw(t0.Add(time.Hour), f.Mono()) // stepped forward: the next expectation starts from it
	mono += time.Second
	if got, _ := f.Expect(); !got.Equal(t0.Add(time.Hour + time.Second)) {
		t.Fatalf("expect = %v after a step, want %v", got, t0.Add(time.Hour+time.Second))
	}
	// A reading taken during a call that lasted a minute is paired with
	// the monotonic reading from before the call: the expectation is a
	// minute late, never early.
	at := f.Mono()
	mono += time.Minute
	f.Saw(t0.Add(time.Hour+time.Second), at)
	if got, _ := f.Expect(); !got.Equal(t0.Add(time.Hour + time.Minute + time.Second)) {
		t.Fatalf("expect = %v after a long call, want %v", got, t0.Add(time.Hour+time.Minute+time.Second))
	}
	if _, ok := NewForward(nil).Expect(); ok {
		t.Fatal("a Forward without a monotonic clock expects something")
	}
}
