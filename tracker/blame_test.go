package tracker

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
)

var (
	destFault = errorhandling.Classification{Class: errorhandling.ClassTransient, Retryable: true, Blame: errorhandling.BlameDestination}
	msgFault  = errorhandling.Classification{Class: errorhandling.ClassTransient, Retryable: true, Blame: errorhandling.BlameMessage}
)

// newBlamer backs services off 1s, 2s, 4s... and processes 10s, 20s, ...
func newBlamer(c clock.Clock) *Blamer {
	return NewBlamer(
		NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: time.Second}, Logger: discard}}),
		NewRegistry(RegistryConfig{Config: Config{Clock: c, Strategy: doubling{base: 10 * time.Second}, Logger: discard}}),
	)
}

func TestBlameDestinationChargesOnlyTheService(t *testing.T) {
	t.Parallel()
	b := newBlamer(newFake())
	tok := b.Record("svc", "m1", destFault)
	wantDeadline(t, tok, t0.Add(time.Second))
	if b.Service("svc").Faults() != 1 {
		t.Fatal("service not charged")
	}
	if b.Processes().Len() != 0 {
		t.Fatal("a destination fault made a process tracker")
	}
	// Unrecognised blame values count as the service's (seed 004 leans
	// that way).
	b.Record("svc", "m1", errorhandling.Classification{Retryable: true, Blame: errorhandling.Blame(99)})
	if b.Service("svc").Faults() != 2 || b.Parameter("svc", "m1").Faults() != 0 {
		t.Fatal("unknown blame not charged to the service alone")
	}
}

func TestBlameMessageChargesOnlyTheProcess(t *testing.T) {
	t.Parallel()
	b := newBlamer(newFake())
	tok := b.Record("svc", "m1", msgFault)
	wantDeadline(t, tok, t0.Add(10*time.Second))
	if f := b.Parameter("svc", "m1").Faults(); f != 1 {
		t.Fatalf("process faults = %d, want 1", f)
	}
	if !b.Service("svc").Healthy() {
		t.Fatal("a message fault charged the service")
	}
	// Other messages on the same service, and the same message elsewhere,
	// go ahead.
	if _, ok := b.TryProceed("svc", "m2"); !ok {
		t.Fatal("m2 blocked by m1's fault")
	}
	if _, ok := b.TryProceed("other", "m1"); !ok {
		t.Fatal("m1 blocked at another service")
	}
	if _, ok := b.TryProceed("svc", "m1"); ok {
		t.Fatal("m1 not blocked at svc")
	}
}

func TestMessageFaultDoesNotHealTheService(t *testing.T) {
	t.Parallel()
	b := newBlamer(newFake())
	b.Record("svc", "m1", destFault)
	b.Record("svc", "m1", destFault)
	b.Record("svc", "m2", msgFault)
	if f := b.Service("svc").Faults(); f != 2 {
		t.Fatalf("service faults = %d, want 2: not healed, not charged", f)
	}
}

func TestBlamerTryProceedIsTheAndOfBoth(t *testing.T) {
	t.Parallel()
	c := newFake()
	b := newBlamer(c)
	b.Record("svc", "m1", msgFault)  // process until +10s
	b.Record("svc", "m1", destFault) // service until +1s; returns the AND
	tok, ok := b.TryProceed("svc", "m1")
	if ok {
		t.Fatal("proceeded during back-off")
	}
	wantDeadline(t, tok, t0.Add(10*time.Second))
	c.Advance(time.Second) // service done, process not
	if _, ok := b.TryProceed("svc", "m1"); ok {
		t.Fatal("proceeded while the process backs off")
	}
	if _, ok := b.TryProceed("svc", "m2"); !ok {
		t.Fatal("m2 blocked once the service's back-off elapsed")
	}
	c.Advance(9 * time.Second)
	if tok, ok := b.TryProceed("svc", "m1"); !ok || !tok.Expired() {
		t.Fatal("blocked after both back-offs elapsed")
	}

	// The other way round: the service is the longer one.
	c2 := newFake()
	b2 := newBlamer(c2)
	b2.Record("svc", "m1", msgFault) // +10s
	for range 5 {
		b2.Record("svc", "x", destFault) // 1+2+4+8+16: the last one ends at +16s
	}
	tok = b2.Record("svc", "m1", errorhandling.Classification{Retryable: true, Blame: errorhandling.BlameMessage})
	wantDeadline(t, tok, t0.Add(20*time.Second)) // process's second: 20s > 16s
	tok, _ = b2.TryProceed("svc", "m2")
	wantDeadline(t, tok, t0.Add(16*time.Second))
}

func TestBlamerRecordHonoursRetryAfterAndPermanence(t *testing.T) {
	t.Parallel()
	b := newBlamer(newFake())
	c := destFault
	c.RetryAfter = time.Minute
	wantDeadline(t, b.Record("svc", "m1", c), t0.Add(time.Minute))

	perm := errorhandling.Classification{Class: errorhandling.ClassPermanent, Blame: errorhandling.BlameMessage}
	if tok := b.Record("svc2", "m1", perm); !tok.Never() {
		t.Fatal("a permanent fault's token must never expire")
	}
	// The tracker still counts an ordinary fault.
	if tok := b.Parameter("svc2", "m1").Token(); tok.Never() || !tok.Deadline().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("process token = %v", tok.Deadline())
	}
}

func TestBlamerSucceed(t *testing.T) {
	t.Parallel()
	b := newBlamer(newFake())
	b.Record("svc", "m1", destFault)
	b.Record("svc", "m1", msgFault)
	b.Succeed("svc", "m1")
	if !b.Service("svc").Healthy() {
		t.Fatal("service not healthy after Succeed")
	}
	if b.Processes().Len() != 0 {
		t.Fatal("a healthy process tracker was kept")
	}
	if _, ok := b.TryProceed("svc", "m1"); !ok {
		t.Fatal("blocked after Succeed")
	}
	b.Succeed("svc", "never-seen")
	if b.Processes().Len() != 0 {
		t.Fatal("Succeed made a process tracker")
	}
	if NewBlamer(nil, nil).Services() == nil {
		t.Fatal("nil registries not defaulted")
	}
}

func TestBlamerProcessNames(t *testing.T) {
	t.Parallel()
	b := NewBlamer(nil, NewRegistry(RegistryConfig{Config: Config{Name: "process", Logger: discard}}))
	if n := b.Parameter("svc", "m1").Name(); n != "process/svc/m1" {
		t.Fatalf("name = %q", n)
	}
	if b.Parameter("a/b", "c") == b.Parameter("a", "b/c") {
		t.Fatal("distinct processes share a tracker")
	}
}
