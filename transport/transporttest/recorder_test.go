package transporttest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

func TestRecorderWaitsForArrivals(t *testing.T) {
	r := NewRecorder()
	go func() {
		for _, id := range []string{"a", "b", "c"} {
			r.Record(Delivery{ID: id})
		}
	}()
	got, err := r.Received(context.Background(), 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("Received = %v, %v", got, err)
	}
	if got[0].ID != "a" || got[2].ID != "c" {
		t.Fatalf("order = %v", got)
	}
	if r.Len() != 3 {
		t.Fatalf("Len = %d", r.Len())
	}
}

func TestRecorderGivesUpWithContext(t *testing.T) {
	r := NewRecorder()
	r.Record(Delivery{ID: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := r.Received(ctx, 2)
	if !errors.Is(err, context.Canceled) || len(got) != 1 {
		t.Fatalf("Received = %v, %v; want the one delivery and context.Canceled", got, err)
	}
}

func TestRecorderCopies(t *testing.T) {
	r := NewRecorder()
	p := []byte("x")
	h := map[string]string{"k": "v"}
	r.Record(Delivery{Payload: p, Headers: h})
	p[0] = 'y'
	h["k"] = "w"
	got, _ := r.Received(context.Background(), 1)
	got[0].Payload[0] = 'z'
	again, _ := r.Received(context.Background(), 1)
	if string(again[0].Payload) != "x" || again[0].Headers["k"] != "v" {
		t.Fatalf("recorder shares memory with callers: %+v", again[0])
	}
}

func TestFromMessage(t *testing.T) {
	m := &outbox.Message{ID: uuid.New(), Stream: "s", Type: "t", Payload: []byte("p"), Headers: map[string]string{"a": "b"}}
	d := FromMessage(m)
	if d.ID != m.ID.String() || d.Stream != "s" || d.Type != "t" || string(d.Payload) != "p" || d.Headers["a"] != "b" {
		t.Fatalf("FromMessage = %+v", d)
	}
}
