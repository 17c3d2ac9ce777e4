package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/backstophq/backstop/outbox"
)

// testSingle: one delivery arrives once, with its fields intact.
func testSingle(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("orders-1", 1)
	m.Type = "order.created"
	e.deliver(m)
	got := e.fence()
	if n := count(got, m.ID); n != 1 {
		t.Fatalf("message arrived %d times, want once", n)
	}
	sameMessage(t, find(t, got, m.ID), m)
}

// testHeaders: the message's headers arrive with it.
func testHeaders(t *testing.T, h Harness) {
	if !h.Features.Headers {
		t.Skip("transport does not carry headers (Features.Headers)")
	}
	e := newEnv(t, h)
	m := e.message("", 1)
	want := map[string]string{"X-Tenant": "acme", "X-Trace-Id": "4bf92f3577b34da6"}
	m.Headers = maps.Clone(want)
	e.deliver(m)
	d := find(t, e.wait(1), m.ID)
	for k, v := range want {
		if got, ok := header(d.Headers, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q; got %v", k, got, ok, v, d.Headers)
		}
	}
}

// testEmptyPayload: a message without a body is delivered.
func testEmptyPayload(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("", 1)
	m.Payload = nil
	e.deliver(m)
	if d := find(t, e.wait(1), m.ID); len(d.Payload) != 0 {
		t.Fatalf("Payload = %q, want empty", d.Payload)
	}
}

// testConcurrent: concurrent Deliver calls all arrive exactly once.
func testConcurrent(t *testing.T, h Harness) {
	e := newEnv(t, h)
	msgs := make([]*outbox.Message, h.Messages)
	for i := range msgs {
		stream := fmt.Sprintf("c%d", i%5)
		if i%7 == 0 {
			stream = ""
		}
		msgs[i] = e.message(stream, i)
	}
	work := make(chan *outbox.Message)
	var wg sync.WaitGroup
	for range h.Concurrency {
		wg.Go(func() {
			for m := range work {
				if err := e.tr.Deliver(e.ctx, m); err != nil {
					t.Errorf("Deliver %s: %v", m.ID, err)
				}
			}
		})
	}
	for _, m := range msgs {
		work <- m
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	e.wait(len(msgs))
	got := e.fence()
	seen := make(map[string]int, len(got))
	for _, d := range got {
		seen[d.ID]++
	}
	for _, m := range msgs {
		switch n := seen[m.ID.String()]; {
		case n == 0:
			t.Errorf("message %s never arrived", m.ID)
		case n > 1:
			t.Errorf("message %s arrived %d times", m.ID, n)
		default:
			sameMessage(t, find(t, got, m.ID), m)
		}
	}
	if len(got) != len(msgs) {
		t.Errorf("%d deliveries for %d messages", len(got), len(msgs))
	}
}

// testStreamOrder: messages of a stream delivered one after another
// arrive in that order, streams interleaved.
func testStreamOrder(t *testing.T, h Harness) {
	if !h.Features.Ordered {
		t.Skip("transport does not promise order (Features.Ordered)")
	}
	e := newEnv(t, h)
	const streams, per = 3, 15
	want := map[string][]string{}
	for i := range per {
		for s := range streams {
			m := e.message(fmt.Sprintf("order-%d", s), i)
			e.deliver(m)
			want[m.Stream] = append(want[m.Stream], m.ID.String())
		}
	}
	e.wait(streams * per)
	got := map[string][]string{}
	for _, d := range e.fence() {
		got[d.Stream] = append(got[d.Stream], d.ID)
	}
	for s, ids := range want {
		if fmt.Sprint(got[s]) != fmt.Sprint(ids) {
			t.Errorf("stream %s arrived as\n%v\nwant\n%v", s, got[s], ids)
		}
	}
}

// testResend: delivering the same message again (a crash between delivery
// and the store recording it) arrives again, unless the destination
// de-duplicates.
func testResend(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("resend", 1)
	e.deliver(m)
	again := *m
	e.deliver(&again)
	want := 2
	if h.Features.Dedup {
		want = 1
	} else {
		e.wait(2)
	}
	got := e.fence()
	if n := count(got, m.ID); n != want {
		t.Fatalf("re-sent message arrived %d times, want %d (Features.Dedup = %v)", n, want, h.Features.Dedup)
	}
	for _, d := range got {
		sameMessage(t, d, m)
	}
}

// testCancelled: a Deliver whose context is already done fails with the
// context's error and delivers nothing.
func testCancelled(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("cancel", 1)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	err := e.tr.Deliver(ctx, m)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Deliver with a cancelled context = %v, want an error wrapping context.Canceled", err)
	}
	if n := count(e.fence(), m.ID); n != 0 {
		t.Fatalf("message of a cancelled Deliver arrived %d times, want 0", n)
	}
}

// testClose: Close after deliveries succeeds, and closing again does not
// panic.
func testClose(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("", 1)
	e.deliver(m)
	e.wait(1)
	e.closed = true
	if err := e.tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_ = e.tr.Close() // must not panic; the error is the transport's choice
}
