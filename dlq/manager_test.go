package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
)

var discard = WithLogger(slog.New(slog.DiscardHandler))

func TestThresholdFiresOncePerCrossing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue()
	m := NewManager(q, 3, discard)
	var fired []int
	m.OnThresholdReached(func(n int) { fired = append(fired, n) })
	add := func() {
		t.Helper()
		if err := m.Add(ctx, &Entry{}); err != nil {
			t.Fatal(err)
		}
	}
	add()
	add()
	if len(fired) != 0 {
		t.Fatalf("fired below the threshold: %v", fired)
	}
	add()
	add()
	add()
	if !reflect.DeepEqual(fired, []int{3}) {
		t.Fatalf("fired %v, want once with 3", fired)
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	add() // sees 1: re-arms
	add()
	if len(fired) != 1 {
		t.Fatalf("fired %v before the second crossing", fired)
	}
	add()
	add()
	if !reflect.DeepEqual(fired, []int{3, 3}) {
		t.Fatalf("fired %v, want [3 3]", fired)
	}
}

func TestThresholdDisabled(t *testing.T) {
	t.Parallel()
	m := NewManager(NewMemoryQueue(), 0, discard)
	m.OnThresholdReached(func(int) { t.Error("threshold 0 fired") })
	for range 3 {
		if err := m.Add(context.Background(), &Entry{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestThresholdConcurrentFiresOnce(t *testing.T) {
	t.Parallel()
	m := NewManager(NewMemoryQueue(), 10, discard)
	var mu sync.Mutex
	var fired, added int
	m.OnThresholdReached(func(int) { mu.Lock(); fired++; mu.Unlock() })
	m.OnEntryAdded(func(*Entry) { mu.Lock(); added++; mu.Unlock() })
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if err := m.Add(context.Background(), &Entry{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if fired != 1 || added != 50 {
		t.Fatalf("threshold fired %d times, OnEntryAdded %d; want 1, 50", fired, added)
	}
}

func TestOnEntryAdded(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue()
	m := NewManager(q, 100, discard)
	var got []*Entry
	m.OnEntryAdded(func(e *Entry) { got = append(got, e) })
	m.OnEntryAdded(func(e *Entry) { got = append(got, e) })
	e := &Entry{TaskID: "load"}
	if err := m.Add(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != e || got[0].ID == "" || got[0].Status != StatusPending {
		t.Fatalf("callbacks got %+v, want the added entry twice with its ID", got)
	}
}

func TestAddQueueErrorSkipsCallbacks(t *testing.T) {
	t.Parallel()
	q, _ := newTestQueue()
	m := NewManager(q, 1, discard)
	m.OnEntryAdded(func(*Entry) { t.Error("OnEntryAdded after a failed Add") })
	m.OnThresholdReached(func(int) { t.Error("threshold after a failed Add") })
	if err := m.Add(context.Background(), nil); err == nil {
		t.Fatal("Add(nil) succeeded")
	}
}

func TestAddFailedTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue()
	var logs bytes.Buffer
	m := NewManager(q, 100, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ended := t0.Add(-time.Minute)
	ti := &models.TaskInstance{ID: "ti-1", TaskID: "load", DAGRunID: "run-1", DAGID: "etl", Attempt: 3,
		State: models.TaskStateFailed, StartedAt: ended.Add(-time.Second), EndedAt: ended}
	dag := &models.DAG{ID: "etl", Name: "ETL pipeline"}
	taskErr := fmt.Errorf("load: %w", errors.New("row 42 rejected"))
	if err := m.AddFailedTask(ctx, ti, dag, taskErr); err != nil {
		t.Fatal(err)
	}
	all, _ := q.List(ctx, nil)
	if len(all) != 1 {
		t.Fatalf("queue holds %d entries", len(all))
	}
	e := all[0]
	want := Entry{ID: e.ID, TaskInstanceID: "ti-1", TaskID: "load", DAGRunID: "run-1", DAGID: "etl",
		FailureReason: "HandlerException", Reason: errorhandling.ReasonHandlerException,
		FailureTime: t0, Attempts: 3, LastAttemptTime: ended, ErrorMessage: "load: row 42 rejected",
		Fingerprint: errorhandling.Fingerprint(taskErr), Status: StatusPending,
		Metadata: map[string]interface{}{"dag_name": "ETL pipeline", "error_class": "unknown"}}
	if !reflect.DeepEqual(*e, want) {
		t.Fatalf("entry\n got %+v\nwant %+v", *e, want)
	}
	if e.Fingerprint == "" {
		t.Fatal("empty fingerprint")
	}

	var rec map[string]any
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	for k, v := range map[string]any{"level": "ERROR", "msg": "task dead-lettered", "dlq_id": e.ID,
		"dag_id": "etl", "dag_run_id": "run-1", "task_id": "load", "task_instance_id": "ti-1",
		"attempts": 3.0, "reason": "HandlerException", "error": "load: row 42 rejected"} {
		if rec[k] != v {
			t.Errorf("log %s = %v, want %v", k, rec[k], v)
		}
	}
}

func TestAddFailedTaskReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want errorhandling.FailureReason
	}{
		{"attached", errorhandling.WithReason(errors.New("x"), errorhandling.ReasonDependencyFailure), errorhandling.ReasonDependencyFailure},
		{"attached unknown", errorhandling.WithReason(errors.New("x"), errorhandling.ReasonUnknown), errorhandling.ReasonUnknown},
		{"classified", fmt.Errorf("call: %w", context.DeadlineExceeded), errorhandling.ReasonTimeoutExceeded},
		{"unclassified", errors.New("x"), errorhandling.ReasonHandlerException},
		{"nil error", nil, errorhandling.ReasonHandlerException},
	}
	for _, tt := range tests {
		q, _ := newTestQueue()
		m := NewManager(q, 0, discard)
		if err := m.AddFailedTask(context.Background(), &models.TaskInstance{ID: "i"}, nil, tt.err); err != nil {
			t.Fatal(err)
		}
		all, _ := q.List(context.Background(), nil)
		if all[0].Reason != tt.want || all[0].FailureReason != tt.want.String() {
			t.Errorf("%s: reason %v (%q), want %v", tt.name, all[0].Reason, all[0].FailureReason, tt.want)
		}
	}
}

func TestAddFailedTaskEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := newTestQueue()
	m := NewManager(q, 0, discard)
	if err := m.AddFailedTask(ctx, nil, nil, errors.New("x")); err == nil {
		t.Fatal("nil task instance accepted")
	}
	long := strings.Repeat("é", 3000)
	ended := t0.Add(-time.Second)
	ti := &models.TaskInstance{ID: "i", TaskID: "t", Attempt: 1, EndedAt: ended, Error: long}
	if err := m.AddFailedTask(ctx, ti, &models.DAG{ID: "from-dag"}, nil); err != nil {
		t.Fatal(err)
	}
	all, _ := q.List(ctx, nil)
	e := all[0]
	if n := utf8.RuneCountInString(e.ErrorMessage); n != MaxErrorMessage || !utf8.ValidString(e.ErrorMessage) {
		t.Fatalf("message cut to %d runes (valid %v), want %d", n, utf8.ValidString(e.ErrorMessage), MaxErrorMessage)
	}
	if e.DAGID != "from-dag" || !e.FirstFailureTime.Equal(ended) || e.Fingerprint == "" {
		t.Fatalf("DAGID %q, FirstFailureTime %v, Fingerprint %q", e.DAGID, e.FirstFailureTime, e.Fingerprint)
	}
}

func TestMessageLog(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	m := NewManager(NewMemoryQueue(), 0, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	e := &Entry{MessageID: "msg-1", Destination: "billing", Stream: "acct-7", Seq: 9, FailureReason: "PoisonMessage"}
	if err := m.Add(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level=ERROR", `msg="message dead-lettered"`, "message_id=msg-1",
		"destination=billing", "stream=acct-7", "seq=9", "reason=PoisonMessage", "dlq_id=" + e.ID} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %q", logs.String(), want)
		}
	}
}
