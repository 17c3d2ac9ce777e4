package dlq

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func newTestQueue(opts ...MemoryOption) (*MemoryQueue, *clock.Fake) {
	fc := clock.NewFake(t0)
	return NewMemoryQueue(append([]MemoryOption{WithClock(fc)}, opts...)...), fc
}

func mustAdd(t *testing.T, q Queue, e *Entry) *Entry {
	t.Helper()
	if err := q.Add(context.Background(), e); err != nil {
		t.Fatalf("Add: %v", err)
	}
	return e
}

func ids(entries []*Entry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return out
}

func TestAddDefaultsAndCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue()
	e := mustAdd(t, q, &Entry{TaskID: "t", Headers: map[string]string{"k": "v"}, Payload: []byte("p")})
	u, err := uuid.Parse(e.ID)
	if err != nil || u.Version() != 7 {
		t.Fatalf("ID = %q (%v), want a UUIDv7", e.ID, err)
	}
	if e.Status != StatusPending || !e.FailureTime.Equal(t0) {
		t.Fatalf("Status, FailureTime = %q, %v; want pending, %v", e.Status, e.FailureTime, t0)
	}
	e.Headers["k"], e.Payload[0], e.TaskID = "changed", 'X', "changed"
	got, err := q.Get(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.TaskID != "t" || got.Headers["k"] != "v" || string(got.Payload) != "p" {
		t.Fatalf("stored entry changed through the caller's: %+v", got)
	}
	got.Headers["k"] = "changed again"
	again, _ := q.Get(ctx, e.ID)
	if again.Headers["k"] != "v" {
		t.Fatal("stored entry changed through Get's copy")
	}
	if err := q.Add(ctx, &Entry{ID: e.ID}); err == nil {
		t.Fatal("Add of an existing ID succeeded")
	}
}

func TestUnknownID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue()
	_, getErr := q.Get(ctx, "nope")
	_, listErr := q.List(ctx, &Filters{Cursor: "nope"})
	for name, err := range map[string]error{
		"Get": getErr, "Replay": q.Replay(ctx, "nope"), "Delete": q.Delete(ctx, "nope"),
		"Resolve": q.Resolve(ctx, "nope", ""), "List cursor": listErr,
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", name, err)
		}
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue()
	add := func(e *Entry) {
		mustAdd(t, q, e)
		fc.Advance(time.Minute)
	}
	add(&Entry{ID: "a", DAGID: "d1", TaskID: "t1", Reason: errorhandling.ReasonHandlerException, Fingerprint: "fp1"})
	add(&Entry{ID: "b", DAGID: "d1", TaskID: "t2", Reason: errorhandling.ReasonTimeoutExceeded, Fingerprint: "fp2"})
	add(&Entry{ID: "c", DAGID: "d2", TaskID: "t1", Reason: errorhandling.ReasonHandlerException, Fingerprint: "fp2"})
	add(&Entry{ID: "m1", Destination: "dst1", Stream: "s1", Reason: errorhandling.ReasonPoisonMessage, Fingerprint: "fp1"})
	add(&Entry{ID: "m2", Destination: "dst2", Stream: "s1", Reason: errorhandling.ReasonPoisonMessage})
	if err := q.Resolve(ctx, "b", "fixed"); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	poison := errorhandling.ReasonPoisonMessage
	yes, no := true, false
	tests := []struct {
		name string
		f    *Filters
		want []string
	}{
		{"nil", nil, []string{"a", "b", "c", "m1", "m2"}},
		{"zero", &Filters{}, []string{"a", "b", "c", "m1", "m2"}},
		{"DAGID", &Filters{DAGID: "d1"}, []string{"a", "b"}},
		{"TaskID", &Filters{TaskID: "t1"}, []string{"a", "c"}},
		{"Destination", &Filters{Destination: "dst1"}, []string{"m1"}},
		{"Stream", &Filters{Stream: "s1"}, []string{"m1", "m2"}},
		{"Reason", &Filters{Reason: &poison}, []string{"m1", "m2"}},
		{"Fingerprint", &Filters{Fingerprint: "fp1"}, []string{"a", "m1"}},
		{"Status resolved", &Filters{Status: StatusResolved}, []string{"b"}},
		{"Status pending", &Filters{Status: StatusPending}, []string{"a", "m1", "m2"}},
		{"Status replayed", &Filters{Status: StatusReplayed}, []string{"c"}},
		{"After is inclusive", &Filters{After: at(2)}, []string{"c", "m1", "m2"}},
		{"Before is exclusive", &Filters{Before: at(2)}, []string{"a", "b"}},
		{"After and Before", &Filters{After: at(1), Before: at(3)}, []string{"b", "c"}},
		{"Replayed true", &Filters{Replayed: &yes}, []string{"c"}},
		{"Replayed false", &Filters{Replayed: &no}, []string{"a", "b", "m1", "m2"}},
		{"Limit", &Filters{Limit: 2}, []string{"a", "b"}},
		{"Cursor", &Filters{Cursor: "b"}, []string{"c", "m1", "m2"}},
		{"AND", &Filters{DAGID: "d1", TaskID: "t1"}, []string{"a"}},
		{"AND none", &Filters{DAGID: "d2", Replayed: &no}, []string{}},
		{"filters then Limit", &Filters{Fingerprint: "fp2", Limit: 1}, []string{"b"}},
	}
	for _, tt := range tests {
		got, err := q.List(ctx, tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(ids(got), tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, ids(got), tt.want)
		}
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fc := newTestQueue()
	for i := range 25 {
		mustAdd(t, q, &Entry{TaskID: "t"})
		if i%3 == 2 { // groups of three share a FailureTime: ID breaks ties
			fc.Advance(time.Second)
		}
	}
	all, _ := q.List(ctx, nil)
	var seen []string
	var sizes []int
	f := &Filters{Limit: 10}
	for {
		p, err := q.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) == 0 {
			break
		}
		sizes = append(sizes, len(p))
		seen = append(seen, ids(p)...)
		f.Cursor = p[len(p)-1].ID
	}
	if !reflect.DeepEqual(sizes, []int{10, 10, 5}) {
		t.Fatalf("page sizes = %v, want [10 10 5]", sizes)
	}
	if !reflect.DeepEqual(seen, ids(all)) {
		t.Fatalf("pages = %v, want every entry once in order %v", seen, ids(all))
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var hooked []*Entry
	hookErr := errors.New("destination down")
	fail := true
	q, fc := newTestQueue(WithReplayFunc(func(_ context.Context, e *Entry) error {
		hooked = append(hooked, e)
		e.ErrorMessage = "changed by hook"
		if fail {
			return hookErr
		}
		return nil
	}))
	e := mustAdd(t, q, &Entry{ErrorMessage: "boom"})
	fc.Advance(time.Hour)

	if err := q.Replay(ctx, e.ID); !errors.Is(err, hookErr) {
		t.Fatalf("Replay with failing hook: err = %v, want %v", err, hookErr)
	}
	if got, _ := q.Get(ctx, e.ID); got.Replayed || got.ReplayedAt != nil {
		t.Fatalf("failed replay marked the entry: %+v", got)
	}

	fail = false
	if err := q.Replay(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	got, _ := q.Get(ctx, e.ID)
	if !got.Replayed || got.ReplayedAt == nil || !got.ReplayedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after replay: Replayed %v, ReplayedAt %v", got.Replayed, got.ReplayedAt)
	}
	if got.ErrorMessage != "boom" || len(hooked) != 2 || hooked[1].ID != e.ID {
		t.Fatalf("hook saw %d entries; stored message %q", len(hooked), got.ErrorMessage)
	}
	if err := q.Replay(ctx, e.ID); !errors.Is(err, ErrAlreadyReplayed) {
		t.Fatalf("second Replay: err = %v, want ErrAlreadyReplayed", err)
	}
	if len(hooked) != 2 {
		t.Fatal("hook called for an already replayed entry")
	}
}

func TestReplayInProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	q, _ := newTestQueue(WithReplayFunc(func(context.Context, *Entry) error {
		close(started)
		<-release
		return nil
	}))
	e := mustAdd(t, q, &Entry{})
	done := make(chan error)
	go func() { done <- q.Replay(ctx, e.ID) }()
	<-started
	if err := q.Replay(ctx, e.ID); !errors.Is(err, ErrAlreadyReplayed) {
		t.Fatalf("concurrent Replay: err = %v, want ErrAlreadyReplayed", err)
	}
	if got, _ := q.Get(ctx, e.ID); got.Replayed {
		t.Fatal("marked replayed before the hook returned")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
