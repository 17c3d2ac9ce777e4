package dlq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/backstophq/backstop/workflow/models"
)

// opaqueQueue refuses a duplicate ID with an error that does not say
// ErrExists, as a database's unique-key violation does.
type opaqueQueue struct{ *MemoryQueue }

func (q opaqueQueue) Add(ctx context.Context, e *Entry) error {
	if err := q.MemoryQueue.Add(ctx, e); err != nil {
		return fmt.Errorf("duplicate key value violates unique constraint: %s", e.ID)
	}
	return nil
}

// failingQueue refuses every Add, for a reason other than the ID.
type failingQueue struct{ *MemoryQueue }

func (failingQueue) Add(context.Context, *Entry) error { return errors.New("connection refused") }

// Adding a failure under an ID the queue holds already (two processes
// dead-lettering the same failure) changes nothing and says ErrExists:
// the entry stays as the first add left it, and the callbacks do not run
// a second time.
func TestAddUnderAHeldIDSaysErrExists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		queue func(*MemoryQueue) Queue
	}{
		{"memory", func(q *MemoryQueue) Queue { return q }},
		{"unique key violation", func(q *MemoryQueue) Queue { return opaqueQueue{q} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mq, _ := newTestQueue()
			m := NewManager(tc.queue(mq), 1, discard)
			var added []string
			var fired int
			m.OnEntryAdded(func(e *Entry) { added = append(added, e.ID) })
			m.OnThresholdReached(func(int) { fired++ })
			ti := &models.TaskInstance{ID: "r/t/2", TaskID: "t", DAGRunID: "r", DAGID: "d", Attempt: 2, Error: "boom"}
			first, err := m.FailedTaskEntry(ti, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			first.ID = "failure-key"
			if err := m.Add(ctx, first); err != nil {
				t.Fatal(err)
			}
			again, _ := m.FailedTaskEntry(ti, nil, errors.New("boom, seen later"))
			again.ID = "failure-key"
			if err := m.Add(ctx, again); !errors.Is(err, ErrExists) {
				t.Fatalf("second Add under the same ID: %v, want ErrExists", err)
			}
			all, _ := mq.List(ctx, nil)
			if len(all) != 1 || all[0].ErrorMessage != "boom" || all[0].TaskInstanceID != "r/t/2" {
				t.Fatalf("queue holds %d entries (%+v), want the first one alone", len(all), all)
			}
			if !reflect.DeepEqual(added, []string{"failure-key"}) || fired != 1 {
				t.Fatalf("OnEntryAdded saw %v and the threshold fired %d times, want once each", added, fired)
			}
		})
	}
}

// An Add that fails for another reason is not ErrExists, with or without
// an ID.
func TestFailedAddIsNotErrExists(t *testing.T) {
	t.Parallel()
	mq, _ := newTestQueue()
	m := NewManager(failingQueue{mq}, 0, discard)
	for _, id := range []string{"", "failure-key"} {
		if err := m.Add(context.Background(), &Entry{ID: id}); err == nil || errors.Is(err, ErrExists) {
			t.Errorf("Add of ID %q on a failing queue: %v, want its error, not ErrExists", id, err)
		}
	}
}

// FailedTaskEntry builds the entry AddFailedTask adds.
func TestFailedTaskEntryIsWhatAddFailedTaskAdds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mq, _ := newTestQueue()
	m := NewManager(mq, 0, discard)
	ti := &models.TaskInstance{ID: "r/t/1", TaskID: "t", DAGRunID: "r", Attempt: 1, EndedAt: t0, Error: "timeout"}
	dag := &models.DAG{ID: "d", Name: "Daily"}
	if err := m.AddFailedTask(ctx, ti, dag, nil); err != nil {
		t.Fatal(err)
	}
	all, _ := mq.List(ctx, nil)
	want, err := m.FailedTaskEntry(ti, dag, nil)
	if err != nil {
		t.Fatal(err)
	}
	want.ID, want.Status, want.FailureTime = all[0].ID, all[0].Status, all[0].FailureTime
	if !reflect.DeepEqual(all[0], want) {
		t.Fatalf("AddFailedTask added\n%+v\nFailedTaskEntry built\n%+v", all[0], want)
	}
	if _, err := m.FailedTaskEntry(nil, dag, nil); err == nil {
		t.Fatal("FailedTaskEntry accepted a nil task instance")
	}
}
