package wfstoretest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// testOutdated: Outdated returns the running runs of a named DAG in
// another shape than the named one that nobody has driven for the idle
// time (no live lease, no task started or ended since), and nothing else.
func testOutdated(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	for _, spec := range []struct {
		id, dag, hash, owner string
	}{{"old-idle", "mine", "h-old", "gone"}, {"old-free", "mine", "h-old", ""}, {"old-recent", "mine", "h-old", "gone"},
		{"old-held", "mine", "h-old", "live"}, {"new", "mine", "h-new", "gone"}, {"other", "other", "h1", "gone"},
		{"old-ended", "mine", "h-old", "gone"}, {"old-released", "mine", "h-old", "gone"}} {
		run := &wfstore.Run{ID: spec.id, DAGID: spec.dag, DAGHash: spec.hash}
		must(t, "create "+spec.id, s.CreateRun(ctx, run, []string{"a"}, lease(spec.owner, 0)))
	}
	// old-recent's task ended 15 minutes on; old-held's lease is renewed
	// 19 minutes on; old-ended has ended; old-released was held until
	// its instance released it 15 minutes on (a shutdown: it was driven
	// until then, though none of its tasks started or ended).
	must(t, "start", s.StartAttempt(ctx, "old-recent", "a", 1, lease("gone", time.Second)))
	must(t, "finish", s.FinishAttempt(ctx, &wfstore.Finish{RunID: "old-recent", TaskID: "a", Attempt: 1, Owner: "gone",
		Now: t0.Add(15 * time.Minute), Outcome: wfstore.OutcomeFailed, State: models.TaskStateUpForRetry,
		NextAttemptAt: t0.Add(time.Hour)}))
	must(t, "renew", s.RenewRun(ctx, "old-held", lease("live", 19*time.Minute)))
	must(t, "renew", s.RenewRun(ctx, "old-released", lease("gone", 15*time.Minute)))
	must(t, "release", s.ReleaseRun(ctx, "old-released", lease("gone", 15*time.Minute)))
	if ok, err := s.EndRun(ctx, "old-ended", lease("gone", 0), models.RunStateFailed, "x"); !ok || err != nil {
		t.Fatalf("EndRun = %v, %v", ok, err)
	}
	now := lease("me", 20*time.Minute)
	ids, err := s.Outdated(ctx, now, 10*time.Minute, 10, []string{wfstore.ShapeKey("h-new", "mine")})
	must(t, "outdated", err)
	if want := []string{"old-free", "old-idle"}; !slices.Equal(ids, want) {
		t.Errorf("Outdated idle 10 min = %q, want %q", ids, want)
	}
	if ids, _ := s.Outdated(ctx, now, 10*time.Minute, 1, []string{wfstore.ShapeKey("h-new", "mine")}); len(ids) != 1 {
		t.Errorf("limit 1 gave %q", ids)
	}
	ids, err = s.Outdated(ctx, now, 4*time.Minute, 10, []string{wfstore.ShapeKey("h-new", "mine")})
	must(t, "outdated", err)
	if want := []string{"old-free", "old-idle", "old-recent", "old-released"}; !slices.Equal(ids, want) {
		t.Errorf("Outdated idle 4 min = %q, want %q", ids, want)
	}
	for _, shapes := range [][]string{nil, {}} {
		if ids, err := s.Outdated(ctx, now, 0, 10, shapes); err != nil || len(ids) != 0 {
			t.Errorf("Outdated of shapes %q = %q, %v; want none", shapes, ids, err)
		}
	}
	// The other way round (a deploy rolled back): the newer shape's run.
	ids, err = s.Outdated(ctx, now, 0, 10, []string{wfstore.ShapeKey("h-old", "mine")})
	must(t, "outdated", err)
	if want := []string{"new"}; !slices.Equal(ids, want) {
		t.Errorf("Outdated of shape h-old = %q, want %q", ids, want)
	}
}
