package wfstoretest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// testPostponeRun: a run nobody holds leaves Abandoned until the time
// given, and AcquireRun can still take it at once; a held or ended run is
// left alone.
func testPostponeRun(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	for _, spec := range []struct {
		id, owner string
		at        time.Duration
	}{{"free", "", 0}, {"lapsed", "gone", 0}, {"held", "one", 5 * time.Minute}, {"ended", "one", 0}} {
		must(t, "create", s.CreateRun(ctx, &wfstore.Run{ID: spec.id, DAGID: "dag"}, []string{"a"}, lease(spec.owner, spec.at)))
	}
	if ok, _ := s.EndRun(ctx, "ended", lease("one", 0), models.RunStateFailed, "x"); !ok {
		t.Fatal("EndRun failed")
	}
	now := t0.Add(5 * time.Minute)
	for _, id := range []string{"free", "lapsed", "held", "ended"} {
		must(t, "postpone "+id, s.PostponeRun(ctx, id, now, time.Hour))
	}
	ids, err := s.Abandoned(ctx, wfstore.Lease{Now: now, TTL: time.Minute}, 10, nil)
	must(t, "abandoned", err)
	if len(ids) != 0 {
		t.Errorf("Abandoned after postponing = %q, want none", ids)
	}
	ids, err = s.Abandoned(ctx, wfstore.Lease{Now: now.Add(time.Hour + time.Second), TTL: time.Minute}, 10, nil)
	must(t, "abandoned later", err)
	if !slices.Equal(ids, []string{"held", "free", "lapsed"}) {
		t.Errorf("Abandoned an hour later = %q, want [held free lapsed] (by lapse)", ids)
	}
	for _, id := range []string{"free", "lapsed"} {
		if r := load(t, s, id).Run; r.Owner != "" {
			t.Errorf("postponed run %s is held by %q", id, r.Owner)
		}
		must(t, "acquire postponed "+id, s.AcquireRun(ctx, id, lease("two", 5*time.Minute)))
	}
	if r := load(t, s, "held").Run; r.Owner != "one" || !r.LeaseExpiry.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("postponing a held run changed it: owner %q until %s", r.Owner, r.LeaseExpiry)
	}
	if r := load(t, s, "ended").Run; r.State != models.RunStateFailed {
		t.Errorf("postponing an ended run changed it: %s", r.State)
	}
}
