package clock_test

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeFiresTimersInDeadlineOrder(t *testing.T) {
	f := clock.NewFake(t0)
	late := f.NewTimer(3 * time.Second)
	early := f.NewTimer(time.Second)
	if f.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", f.Pending())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("early fired at %v", got)
	}
	if next, ok := f.NextDeadline(); !ok || !next.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("NextDeadline = %v, %v", next, ok)
	}
	f.Advance(time.Hour)
	<-late.C()
	if f.Pending() != 0 || !f.Now().Equal(t0.Add(time.Hour+time.Second)) {
		t.Fatalf("after advancing: pending %d, now %v", f.Pending(), f.Now())
	}
}

func TestFakeStopAndImmediateTimers(t *testing.T) {
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	f.Advance(time.Minute)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	now := f.NewTimer(0)
	<-now.C() // fires at once
	if now.Stop() {
		t.Fatal("Stop after firing reported true")
	}
	f.Set(t0) // never backwards
	if !f.Now().Equal(t0.Add(time.Minute)) {
		t.Fatalf("Set moved the clock backwards to %v", f.Now())
	}
}

func TestWaitForTimersIsTheSignal(t *testing.T) {
	f := clock.NewFake(t0)
	done := make(chan bool)
	go func() { done <- clock.Sleep(f, 5*time.Second, nil) }()
	d, ok := f.AdvanceToNext(nil)
	if !ok || d != 5*time.Second {
		t.Fatalf("AdvanceToNext = %v, %v", d, ok)
	}
	if !<-done {
		t.Fatal("Sleep reported an interruption")
	}

	stop := make(chan struct{})
	close(stop)
	if f.WaitForTimers(1, stop) {
		t.Fatal("WaitForTimers reported a timer that does not exist")
	}
	if clock.Sleep(f, time.Second, stop) {
		t.Fatal("Sleep with a closed done channel reported a full sleep")
	}
	if !clock.Sleep(f, 0, nil) || clock.OrReal(nil) != clock.Real || clock.OrReal(f) != f {
		t.Fatal("Sleep(0) or OrReal misbehaves")
	}
}

func TestStepMovesTheReadingButNotTheTimePassed(t *testing.T) {
	f := clock.NewFake(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	timer := f.NewTimer(time.Minute)
	f.Advance(10 * time.Second)
	f.Step(time.Hour)
	if got := f.Monotonic(); got != 10*time.Second {
		t.Fatalf("monotonic = %v after advancing 10 s and stepping an hour, want 10s", got)
	}
	select {
	case <-timer.C():
		t.Fatal("a step fired a timer")
	default:
	}
	f.Step(-2 * time.Hour)
	f.Advance(5 * time.Second)
	if got, want := f.Now(), time.Date(2026, 12, 5, 23, 0, 15, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("now = %v, want %v", got, want)
	}
	if got := f.Monotonic(); got != 15*time.Second {
		t.Fatalf("monotonic = %v, want 15s", got)
	}
	if clock.MonotonicOf(f)() != 15*time.Second {
		t.Fatal("MonotonicOf a Fake does not read the Fake")
	}
	if clock.MonotonicOf(clock.Real) == nil || clock.MonotonicOf(nil) == nil {
		t.Fatal("the real clock has no monotonic reading")
	}
}
