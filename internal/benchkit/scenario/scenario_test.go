package scenario

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []Msg{{N: 0, Stream: -1, T: 0}, {N: 123456789, Stream: 9999, T: time.Now().UnixNano()}} {
		got, err := ParsePayload(m.Payload())
		if err != nil || got != m {
			t.Errorf("ParsePayload(%s) = %+v, %v; want %+v", m.Payload(), got, err, m)
		}
	}
	if _, err := ParsePayload([]byte(`{"n":1}`)); err == nil {
		t.Error("ParsePayload of a short payload: no error")
	}
}

func TestCheckerFindsWhatIsWrong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := NewChecker(0, 2)
	for _, n := range []int64{0, 1, 3, 2, 3} { // in order per stream (even and odd); 3 twice
		_ = c.Handle(ctx, Msg{N: n, Stream: n % 2})
	}
	_ = c.Handle(ctx, Msg{N: 4, Stream: 0})
	_ = c.Handle(ctx, Msg{N: 0, Stream: 0}) // a redelivery, not an order violation
	_ = c.Handle(ctx, Msg{N: 10, Stream: 0})
	_ = c.Handle(ctx, Msg{N: 8, Stream: 0}) // behind 10 on stream 0
	var r Result
	c.Verify(&r, 10) // 5, 6, 7, 9 never handled; 10 never written
	if r.Missing != 4 || r.Duplicates != 2 || r.OutOfOrder != 1 || r.Phantoms != 1 {
		t.Errorf("Verify = missing %d, duplicates %d, out of order %d, phantoms %d; want 4, 2, 1, 1",
			r.Missing, r.Duplicates, r.OutOfOrder, r.Phantoms)
	}
	r.Ordered = true
	if got := r.Violations(); got != 6 {
		t.Errorf("Violations() = %d, want 6", got)
	}
}

func TestCheckerFailsFirstAttemptsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := NewChecker(20, 0)
	for n := int64(0); n < 100; n++ {
		err := c.Handle(ctx, Msg{N: n, Stream: -1})
		if want := n%20 == 0; errors.Is(err, ErrTransient) != want {
			t.Fatalf("message %d, first attempt: err %v", n, err)
		}
		if err != nil {
			if err := c.Handle(ctx, Msg{N: n, Stream: -1}); err != nil {
				t.Fatalf("message %d, second attempt: %v", n, err)
			}
		}
	}
	var r Result
	c.Verify(&r, 100)
	if r.Missing != 0 || r.Duplicates != 0 || c.Handled() != 100 {
		t.Errorf("missing %d, duplicates %d, handled %d; want 0, 0, 100", r.Missing, r.Duplicates, c.Handled())
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 500, 99: 990, 99.9: 999, 100: 1000} {
		if got := Percentile(d, p); got != want {
			t.Errorf("Percentile(%v) = %d, want %d", p, got, want)
		}
	}
}
