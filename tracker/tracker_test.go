package tracker

import (
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/retry"
)

func TestHealthyTrackerProceeds(t *testing.T) {
	t.Parallel()
	tr := New(Config{Clock: newFake(), Logger: discard})
	tok, ok := tr.TryProceed()
	if !ok || !tok.Expired() {
		t.Fatalf("healthy TryProceed = %v, expired=%v", ok, tok.Expired())
	}
	if !tr.Healthy() || tr.Faults() != 0 || !tr.FailingSince().IsZero() {
		t.Fatal("new tracker is not healthy")
	}
	tr.Success() // a no-op on a healthy tracker
	if !tr.Healthy() {
		t.Fatal("Success made a healthy tracker unhealthy")
	}
}

func TestFaultBacksOffExactly(t *testing.T) {
	t.Parallel()
	c := newFake()
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second}, Logger: discard})

	tok := tr.Fault()
	wantDeadline(t, tok, t0.Add(time.Second))
	got, ok := tr.TryProceed()
	if ok {
		t.Fatal("TryProceed during back-off = true")
	}
	wantDeadline(t, got, t0.Add(time.Second))
	if tr.Healthy() || tr.Faults() != 1 || !tr.FailingSince().Equal(t0) {
		t.Fatalf("after one fault: healthy=%v faults=%d since=%v", tr.Healthy(), tr.Faults(), tr.FailingSince())
	}

	c.Advance(999 * time.Millisecond)
	if _, ok := tr.TryProceed(); ok {
		t.Fatal("TryProceed 1ms before the deadline = true")
	}
	c.Advance(time.Millisecond)
	got, ok = tr.TryProceed()
	if !ok || !got.Expired() {
		t.Fatal("TryProceed at the deadline = false")
	}
	wantDeadline(t, got, t0.Add(time.Second))
	if tr.Healthy() || tr.Faults() != 1 {
		t.Fatal("an elapsed back-off must keep the fault count")
	}

	// Second and third faults double the back-off from the moment of the
	// fault; FailingSince stays at the first fault.
	wantDeadline(t, tr.Fault(), t0.Add(time.Second+2*time.Second))
	c.Advance(10 * time.Second)
	wantDeadline(t, tr.Fault(), t0.Add(11*time.Second+4*time.Second))
	wantDeadline(t, tr.Token(), t0.Add(15*time.Second))
	if tr.Faults() != 3 || !tr.FailingSince().Equal(t0) {
		t.Fatalf("faults=%d since=%v", tr.Faults(), tr.FailingSince())
	}

	tr.Success()
	if !tr.Healthy() || tr.Faults() != 0 || !tr.FailingSince().IsZero() || !tr.Token().Expired() {
		t.Fatal("Success did not reset the tracker")
	}
	if _, ok := tr.TryProceed(); !ok {
		t.Fatal("TryProceed after Success = false")
	}
	// A new stretch starts over at the first delay.
	wantDeadline(t, tr.Fault(), t0.Add(12*time.Second))
	if !tr.FailingSince().Equal(t0.Add(11 * time.Second)) {
		t.Fatalf("FailingSince = %v", tr.FailingSince())
	}
}

func TestStopGivesTokenThatNeverExpires(t *testing.T) {
	t.Parallel()
	c := newFake()
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second, stopAfter: 2}, Logger: discard})
	tr.Fault()
	tr.Fault()
	tok := tr.Fault()
	if !tok.Never() || !tok.Deadline().Equal(Forever) {
		t.Fatalf("third fault token: never=%v deadline=%v", tok.Never(), tok.Deadline())
	}
	c.Advance(10000 * time.Hour)
	if tok, ok := tr.TryProceed(); ok || !tok.Never() {
		t.Fatal("a stopped tracker let an operation proceed")
	}
	tr.Success()
	if _, ok := tr.TryProceed(); !ok {
		t.Fatal("Success did not reopen a stopped tracker")
	}
}

func TestDefaultStrategy(t *testing.T) {
	t.Parallel()
	s := New(Config{}).strategy
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i, w := range want {
		if got := s.Delay(i + 1); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	if got := s.Delay(1 << 30); got != 5*time.Minute {
		t.Errorf("Delay(huge) = %v, want 5m", got)
	}
}

func TestFaultRetryAfter(t *testing.T) {
	t.Parallel()
	c := newFake()
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second, stopAfter: 2}, Logger: discard})
	wantDeadline(t, tr.FaultRetryAfter(30*time.Second), t0.Add(30*time.Second))
	wantDeadline(t, tr.FaultRetryAfter(time.Second), t0.Add(2*time.Second)) // strategy's 2s is longer
	if !tr.FaultRetryAfter(time.Hour).Never() {
		t.Fatal("Retry-After must not override the strategy's stop")
	}
}

func TestZeroConfigUsesRealClock(t *testing.T) {
	t.Parallel()
	tr := New(Config{Logger: discard})
	before := time.Now()
	tok := tr.Fault()
	if d := tok.Deadline().Sub(before); d < time.Second || d > time.Second+time.Minute {
		t.Fatalf("first default back-off ends %v after now, want about 1s", d)
	}
	if r := tok.Remaining(); r <= 0 || r > time.Second {
		t.Fatalf("Remaining = %v", r)
	}
}

func TestNegativeDelayStops(t *testing.T) {
	t.Parallel()
	tr := New(Config{Clock: newFake(), Strategy: fixed(-5 * time.Second), Logger: discard})
	if !tr.Fault().Never() {
		t.Fatal("a negative delay must stop")
	}
	tr = New(Config{Clock: newFake(), Strategy: fixed(retry.Stop), Logger: discard})
	if !tr.Fault().Never() {
		t.Fatal("retry.Stop must stop")
	}
}

type fixed time.Duration

func (f fixed) Delay(int) time.Duration { return time.Duration(f) }

func TestTrackerConcurrent(t *testing.T) {
	t.Parallel()
	c := newFake()
	var reports sync.Map
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Millisecond}, Logger: discard, Name: "x",
		OnReport: func(r Report) { reports.Store(r.Event, true) }})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				switch (g + i) % 5 {
				case 0, 1:
					tr.Fault()
				case 2:
					tr.TryProceed()
				case 3:
					_ = tr.Faults() + int(tr.FailingSince().Unix()) + int(tr.Token().Remaining())
					_ = tr.Healthy()
				case 4:
					if i%50 == 4 {
						tr.Success()
					}
					c.Advance(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	tr.Success()
	if !tr.Healthy() {
		t.Fatal("not healthy after final Success")
	}
	if _, ok := reports.Load(EventThreshold); !ok {
		t.Fatal("no threshold report after thousands of faults")
	}
}
