// Package wfstoretest is the conformance suite of wfstore.Store: every
// workflow store runs it (wfsqlite against SQLite, wfpostgres against a
// real PostgreSQL server), so that the engine can count on the same
// fences, leases and transitions from each.
package wfstoretest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Harness gives the suite fresh stores.
type Harness struct {
	// New returns a store on empty tables, and a function counting the
	// outbox messages of a type in its database. It is called once per
	// test and may run the tests in parallel.
	New func(t *testing.T) (wfstore.Store, func(typ string) int)
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// lease is owner's lease at t0+at, for a minute.
func lease(owner string, at time.Duration) wfstore.Lease {
	return wfstore.Lease{Owner: owner, Now: t0.Add(at), TTL: time.Minute}
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := map[string]func(*testing.T, Harness){
		"CreateAndLoad":            testCreateAndLoad,
		"Reload":                   testReload,
		"AcquireRenewRelease":      testAcquireRenewRelease,
		"Abandoned":                testAbandoned,
		"PostponeRun":              testPostponeRun,
		"Outdated":                 testOutdated,
		"SteppedBack":              testSteppedBack,
		"StartAttemptFences":       testStartAttemptFences,
		"FinishSuccessCommitsOnce": testFinishSuccess,
		"FinishFailureAndLost":     testFinishFailureAndLost,
		"Mark":                     testMark,
		"EndAndReopen":             testEndAndReopen,
		"IDsNoStoreKeeps":          testIDsNoStoreKeeps,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, h)
		})
	}
}

// newRun creates run "r" of tasks a, b, c held by "one" at t0.
func newRun(t *testing.T, s wfstore.Store) {
	t.Helper()
	run := &wfstore.Run{ID: "r", DAGID: "dag", DAGHash: "h1", Input: []byte(`{"n":1}`),
		Upstream: map[string][]string{"a": {}, "b": {"a"}, "c": {"a", "b"}}}
	if err := s.CreateRun(context.Background(), run, []string{"b", "a", "c"}, lease("one", 0)); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, s wfstore.Store, id string) *wfstore.Snapshot {
	t.Helper()
	snap, err := s.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func mustIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func testCreateAndLoad(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	snap := load(t, s, "r")
	r := snap.Run
	if r.ID != "r" || r.DAGID != "dag" || r.DAGHash != "h1" || r.State != models.RunStateRunning || string(r.Input) != `{"n":1}` ||
		r.Owner != "one" || !r.LeaseExpiry.Equal(t0.Add(time.Minute)) || !r.CreatedAt.Equal(t0) || !r.EndedAt.IsZero() {
		t.Errorf("run = %+v", r)
	}
	if want := map[string][]string{"a": {}, "b": {"a"}, "c": {"a", "b"}}; !reflect.DeepEqual(r.Upstream, want) {
		t.Errorf("upstream = %#v, want %#v", r.Upstream, want)
	}
	if len(snap.Tasks) != 3 || snap.Tasks[0].TaskID != "a" || snap.Tasks[2].TaskID != "c" || len(snap.Attempts) != 0 {
		t.Fatalf("tasks = %+v", snap.Tasks)
	}
	for _, tk := range snap.Tasks {
		if tk.State != models.TaskStatePending || tk.Attempt != 0 || tk.Owner != "" || tk.Result != nil {
			t.Errorf("new task = %+v", tk)
		}
	}
	err := s.CreateRun(ctx, &wfstore.Run{ID: "r", DAGID: "other"}, []string{"x"}, lease("two", 0))
	mustIs(t, "creating r again", err, wfstore.ErrRunExists)
	if load(t, s, "r").Run.DAGID != "dag" {
		t.Error("a second CreateRun changed the run")
	}
	_, err = s.Load(ctx, "missing")
	mustIs(t, "loading a missing run", err, wfstore.ErrNotFound)
	must(t, "create unowned", s.CreateRun(ctx, &wfstore.Run{ID: "free", DAGID: "dag"}, []string{"a"}, lease("", 0)))
	if r := load(t, s, "free").Run; r.Owner != "" || !r.LeaseExpiry.IsZero() || r.Input != nil || r.Upstream != nil {
		t.Errorf("unowned run = %+v", r)
	}
}

func testAcquireRenewRelease(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	mustIs(t, "acquire a live lease", s.AcquireRun(ctx, "r", lease("two", 30*time.Second)), wfstore.ErrLeased)
	must(t, "the holder acquires again", s.AcquireRun(ctx, "r", lease("one", 30*time.Second)))
	must(t, "renew", s.RenewRun(ctx, "r", lease("one", time.Minute)))
	if r := load(t, s, "r").Run; !r.LeaseExpiry.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("renewed lease expires %v", r.LeaseExpiry)
	}
	mustIs(t, "acquire before the renewed lease lapses", s.AcquireRun(ctx, "r", lease("two", 90*time.Second)), wfstore.ErrLeased)
	must(t, "acquire a lapsed lease", s.AcquireRun(ctx, "r", lease("two", 2*time.Minute+time.Millisecond)))
	mustIs(t, "the old holder renews", s.RenewRun(ctx, "r", lease("one", 3*time.Minute)), wfstore.ErrLeaseLost)
	must(t, "release by another", s.ReleaseRun(ctx, "r", lease("one", 2*time.Minute+time.Millisecond)))
	if r := load(t, s, "r").Run; r.Owner != "two" {
		t.Errorf("owner after a stranger's release = %q", r.Owner)
	}
	must(t, "release", s.ReleaseRun(ctx, "r", lease("two", 2*time.Minute+time.Millisecond)))
	must(t, "acquire a released run at once", s.AcquireRun(ctx, "r", lease("three", 2*time.Minute+2*time.Millisecond)))
	mustIs(t, "acquire a missing run", s.AcquireRun(ctx, "missing", lease("x", 0)), wfstore.ErrNotFound)
	if ok, err := s.EndRun(ctx, "r", lease("three", 3*time.Minute), models.RunStateSuccess, "done"); !ok || err != nil {
		t.Fatalf("EndRun = %v, %v", ok, err)
	}
	mustIs(t, "acquire an ended run", s.AcquireRun(ctx, "r", lease("three", 4*time.Minute)), wfstore.ErrRunEnded)
	mustIs(t, "renew an ended run", s.RenewRun(ctx, "r", lease("three", 4*time.Minute)), wfstore.ErrRunEnded)
}

func testAbandoned(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	for _, spec := range []struct {
		id    string
		owner string
		at    time.Duration
	}{{"held", "one", 5 * time.Minute}, {"lapsed-late", "one", 2 * time.Minute}, {"free", "", 0},
		{"lapsed-early", "two", time.Minute}, {"ended", "one", 0}} {
		run := &wfstore.Run{ID: spec.id, DAGID: "dag"}
		must(t, "create", s.CreateRun(ctx, run, []string{"a"}, lease(spec.owner, spec.at)))
	}
	if ok, _ := s.EndRun(ctx, "ended", lease("one", 0), models.RunStateFailed, "x"); !ok {
		t.Fatal("EndRun failed")
	}
	ids, err := s.Abandoned(ctx, lease("", 5*time.Minute), 10, nil)
	must(t, "abandoned", err)
	want := []string{"free", "lapsed-early", "lapsed-late"}
	if len(ids) != len(want) || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Errorf("Abandoned = %q, want %q (unheld first, then by lapse)", ids, want)
	}
	if ids, _ := s.Abandoned(ctx, lease("", 5*time.Minute), 1, nil); len(ids) != 1 {
		t.Errorf("limit 1 gave %q", ids)
	}
	// Named shapes: only their runs, whatever comes first in the order.
	for i, sh := range []struct{ id, dag, hash string }{{"other-dag", "other", "h1"}, {"old-shape", "mine", "h-old"}, {"mine", "mine", "h-new"}} {
		run := &wfstore.Run{ID: sh.id, DAGID: sh.dag, DAGHash: sh.hash}
		must(t, "create", s.CreateRun(ctx, run, []string{"a"}, lease("gone", time.Duration(i)*time.Second)))
	}
	ids, err = s.Abandoned(ctx, lease("", 5*time.Minute), 10, []string{wfstore.ShapeKey("h-new", "mine")})
	must(t, "abandoned by shape", err)
	if len(ids) != 1 || ids[0] != "mine" {
		t.Errorf("Abandoned of shape h-new:mine = %q, want [mine]", ids)
	}
	if ids, _ := s.Abandoned(ctx, lease("", 5*time.Minute), 10, []string{}); len(ids) != 0 {
		t.Errorf("Abandoned of no shape = %q, want none", ids)
	}
}

func testStartAttemptFences(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	mustIs(t, "start by a stranger", s.StartAttempt(ctx, "r", "a", 1, lease("two", 0)), wfstore.ErrConflict)
	mustIs(t, "start skipping a number", s.StartAttempt(ctx, "r", "a", 2, lease("one", 0)), wfstore.ErrConflict)
	mustIs(t, "start on a lapsed lease", s.StartAttempt(ctx, "r", "a", 1, lease("one", 2*time.Minute)), wfstore.ErrConflict)
	must(t, "start", s.StartAttempt(ctx, "r", "a", 1, lease("one", time.Second)))
	mustIs(t, "start a running task", s.StartAttempt(ctx, "r", "a", 2, lease("one", time.Second)), wfstore.ErrConflict)
	snap := load(t, s, "r")
	a := snap.Task("a")
	if a.State != models.TaskStateRunning || a.Attempt != 1 || a.Owner != "one" || !a.StartedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("started task = %+v", a)
	}
	if len(snap.Attempts) != 1 || snap.Attempts[0].Outcome != wfstore.OutcomeRunning || snap.Attempts[0].Owner != "one" ||
		snap.Attempts[0].Number != 1 || !snap.Attempts[0].EndedAt.IsZero() {
		t.Errorf("attempts = %+v", snap.Attempts)
	}
}

// Outbox message types the suite writes.
var msg = func(typ string) *outbox.Message { return &outbox.Message{Destination: "d", Type: typ} }

// testIDsNoStoreKeeps: IDs with a NUL or invalid UTF-8, which PostgreSQL's
// text cannot hold, are refused by every store alike (SQLite would keep
// them), naming the ID, and a lookup of one finds nothing.
func testIDsNoStoreKeeps(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	for _, bad := range []string{"r\x00un", "r\xffun"} {
		runs := []struct {
			run   *wfstore.Run
			tasks []string
		}{
			{&wfstore.Run{ID: bad, DAGID: "dag"}, []string{"a"}},
			{&wfstore.Run{ID: "ok", DAGID: bad}, []string{"a"}},
			{&wfstore.Run{ID: "ok", DAGID: "dag"}, []string{"a", bad}},
		}
		for _, c := range runs {
			err := s.CreateRun(ctx, c.run, c.tasks, lease("one", 0))
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
				t.Errorf("CreateRun with %q: err = %v, want a refusal naming it", bad, err)
			}
		}
		_, err := s.Load(ctx, bad)
		mustIs(t, fmt.Sprintf("Load(%q)", bad), err, wfstore.ErrNotFound)
	}
	_, err := s.Load(ctx, "ok")
	mustIs(t, "Load(ok) after the refusals", err, wfstore.ErrNotFound)
}
