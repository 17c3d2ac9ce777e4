package dlq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// newReplayFixture holds a (pending), b (resolved), c (replayed), d and e
// (pending, DAG d2), one minute apart.
func newReplayFixture(t *testing.T, hook ReplayFunc) *MemoryQueue {
	t.Helper()
	ctx := context.Background()
	q, fc := newTestQueue(WithReplayFunc(hook))
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		dag := "d1"
		if id >= "d" {
			dag = "d2"
		}
		mustAdd(t, q, &Entry{ID: id, DAGID: dag})
		fc.Advance(time.Minute)
	}
	if err := q.Resolve(ctx, "b", "n/a"); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	return q
}

func TestReplayMatchingDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	q := newReplayFixture(t, func(context.Context, *Entry) error { calls++; return nil })
	before, _ := q.List(ctx, nil)
	calls = 0
	got, err := q.ReplayMatching(ctx, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got), []string{"a", "d", "e"}) {
		t.Fatalf("dry run = %v, want [a d e]", ids(got))
	}
	after, _ := q.List(ctx, nil)
	if calls != 0 || !reflect.DeepEqual(before, after) {
		t.Fatalf("dry run changed the queue (hook calls %d)", calls)
	}
	for _, e := range got {
		if e.Replayed {
			t.Fatalf("dry run returned %s as replayed", e.ID)
		}
	}
}

func TestReplayMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var hooked []string
	q := newReplayFixture(t, func(_ context.Context, e *Entry) error { hooked = append(hooked, e.ID); return nil })
	hooked = nil
	got, err := q.ReplayMatching(ctx, &Filters{DAGID: "d2", Limit: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got), []string{"d"}) || !got[0].Replayed || got[0].ReplayedAt == nil {
		t.Fatalf("replayed %+v, want d marked replayed", got)
	}
	got, _ = q.ReplayMatching(ctx, nil, false)
	if !reflect.DeepEqual(ids(got), []string{"a", "e"}) || !reflect.DeepEqual(hooked, []string{"d", "a", "e"}) {
		t.Fatalf("replayed %v, hook saw %v", ids(got), hooked)
	}
	if got, _ := q.ReplayMatching(ctx, nil, false); len(got) != 0 {
		t.Fatalf("third run replayed %v", ids(got))
	}
}

func TestReplayMatchingStopsAtHookError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("boom")
	q := newReplayFixture(t, func(_ context.Context, e *Entry) error {
		if e.ID == "d" {
			return boom
		}
		return nil
	})
	got, err := q.ReplayMatching(ctx, nil, false)
	if !errors.Is(err, boom) || !reflect.DeepEqual(ids(got), []string{"a"}) {
		t.Fatalf("got %v, %v; want [a] and boom", ids(got), err)
	}
	if e, _ := q.Get(ctx, "e"); e.Replayed {
		t.Fatal("replay went on past the failing entry")
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue()
	e := mustAdd(t, q, &Entry{})
	fc.Advance(2 * time.Hour)
	if err := q.Resolve(ctx, e.ID, "Fixed and re-enqueued"); err != nil {
		t.Fatal(err)
	}
	got, _ := q.Get(ctx, e.ID)
	if got.Status != StatusResolved || got.ResolutionNotes != "Fixed and re-enqueued" ||
		got.ResolvedAt == nil || !got.ResolvedAt.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("after Resolve: %+v", got)
	}
}

func TestDeleteAndPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue()
	for range 5 {
		mustAdd(t, q, &Entry{})
		fc.Advance(time.Minute)
	}
	count := func() int {
		t.Helper()
		n, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 5 {
		t.Fatalf("Count = %d, want 5", n)
	}
	n, err := q.PurgeBefore(ctx, t0.Add(2*time.Minute))
	if err != nil || n != 2 || count() != 3 {
		t.Fatalf("PurgeBefore removed %d (%v), %d left; want 2, 3 left", n, err, count())
	}
	if n, _ := q.PurgeBefore(ctx, t0); n != 0 {
		t.Fatalf("PurgeBefore(t0) removed %d", n)
	}
	all, _ := q.List(ctx, nil)
	if err := q.Delete(ctx, all[0].ID); err != nil || count() != 2 {
		t.Fatalf("Delete: %v, %d left", err, count())
	}
	if err := q.Delete(ctx, all[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if err := q.Purge(ctx); err != nil || count() != 0 {
		t.Fatalf("Purge: %v, %d left", err, count())
	}
}

func TestMemoryQueueConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue(WithReplayFunc(func(context.Context, *Entry) error { return nil }))
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e := &Entry{DAGID: fmt.Sprint("d", w%2)}
				if err := q.Add(ctx, e); err != nil {
					t.Error(err)
					return
				}
				fc.Advance(time.Millisecond)
				switch i % 4 {
				case 0:
					_ = q.Replay(ctx, e.ID)
				case 1:
					_, _ = q.List(ctx, &Filters{DAGID: "d1", Limit: 5})
				case 2:
					_ = q.Resolve(ctx, e.ID, "ok")
				case 3:
					_, _ = q.ReplayMatching(ctx, &Filters{DAGID: "d0", Limit: 3}, false)
				}
			}
		})
	}
	wg.Wait()
	all, _ := q.List(ctx, nil)
	if len(all) != workers*each {
		t.Fatalf("List holds %d entries, want %d", len(all), workers*each)
	}
	pending := 0
	for _, e := range all {
		if e.Status == StatusPending {
			pending++
		}
	}
	if n, _ := q.Count(ctx); n != pending || pending == 0 || pending == len(all) {
		t.Fatalf("Count = %d, want the %d pending entries of %d", n, pending, len(all))
	}
	for i := 1; i < len(all); i++ {
		if compareEntries(all[i-1], all[i]) >= 0 {
			t.Fatalf("List out of order at %d", i)
		}
	}
}
