package dlq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLifecycleMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue()
	for _, id := range []string{"a", "b", "c"} {
		mustAdd(t, q, &Entry{ID: id, DAGID: "d"})
	}
	count := func() int {
		n, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count() != 3 {
		t.Fatalf("Count = %d, want 3", count())
	}
	fc.Advance(time.Minute)
	if err := q.ReplayAs(ctx, "a", Action{Actor: "alice", Notes: "fixed"}); err != nil {
		t.Fatal(err)
	}
	a, _ := q.Get(ctx, "a")
	if a.Status != StatusReplayed || !a.Replayed || a.ReplayedBy != "alice" || a.ReplayNotes != "fixed" ||
		a.ReplayedAt == nil || !a.ReplayedAt.Equal(fc.Now()) {
		t.Fatalf("replayed entry = %+v", a)
	}
	if err := q.ResolveAs(ctx, "b", Action{Actor: "bob\x00", Notes: "gone\xff"}); err != nil {
		t.Fatal(err)
	}
	b, _ := q.Get(ctx, "b")
	if b.Status != StatusResolved || b.ResolvedBy != "bob" || b.ResolutionNotes != "gone\uFFFD" {
		t.Fatalf("resolved entry = %+v", b)
	}
	if err := q.Replay(ctx, "b"); !errors.Is(err, ErrResolved) {
		t.Fatalf("Replay resolved: %v, want ErrResolved", err)
	}
	if count() != 1 {
		t.Fatalf("Count = %d, want 1 (only c is pending)", count())
	}
	if err := q.ResolveAs(ctx, "a", Action{Actor: "carol"}); err != nil {
		t.Fatal(err)
	}
	if a, _ = q.Get(ctx, "a"); a.Status != StatusResolved || !a.Replayed {
		t.Fatalf("resolving a replayed entry: %+v", a)
	}
	done, err := q.ReplayMatchingAs(ctx, nil, false, Action{Actor: "bot"})
	if err != nil || len(done) != 1 || done[0].ID != "c" || done[0].ReplayedBy != "bot" {
		t.Fatalf("ReplayMatchingAs = %v, %v; want [c] by bot", done, err)
	}
	if count() != 0 {
		t.Fatalf("Count = %d, want 0", count())
	}
}

func TestEntryClean(t *testing.T) {
	t.Parallel()
	e := &Entry{ErrorMessage: "x\x00y" + strings.Repeat("z", 3000), Headers: map[string]string{"k\xff": "v\x00"},
		Metadata: map[string]interface{}{"n": 1, "s": "a\x00", "m": map[string]interface{}{"x": []interface{}{"\xff"}}}}
	e.Clean()
	if len(e.ErrorMessage) != MaxErrorMessage || !strings.HasPrefix(e.ErrorMessage, "xyz") {
		t.Fatalf("ErrorMessage not cleaned: %d bytes", len(e.ErrorMessage))
	}
	if e.Headers["k\uFFFD"] != "v" || e.Metadata["s"] != "a" || e.Metadata["n"] != 1 ||
		e.Metadata["m"].(map[string]interface{})["x"].([]interface{})[0] != "\uFFFD" {
		t.Fatalf("cleaned entry = %+v", e)
	}
}
