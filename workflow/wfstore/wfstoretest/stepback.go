package wfstoretest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/wfstore"
)

// testSteppedBack: an engine that died holding a run before the clock was
// stepped back an hour does not keep the run for that hour. Its lease,
// stamped before the step, lies further ahead than twice a lease: only a
// step puts it there, so Abandoned moves it to one lease from now, and a
// lease later the run is abandoned and another instance takes it. A live
// holder, which renews on the stepped clock, keeps its run throughout,
// also before its first renewal after the step; a run postponed (no
// owner) stays postponed.
func testSteppedBack(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	must(t, "create dead", s.CreateRun(ctx, &wfstore.Run{ID: "dead", DAGID: "dag"}, []string{"a"}, lease("gone", 0)))
	must(t, "create live", s.CreateRun(ctx, &wfstore.Run{ID: "live", DAGID: "dag"}, []string{"a"}, lease("one", 0)))
	must(t, "create free", s.CreateRun(ctx, &wfstore.Run{ID: "free", DAGID: "dag"}, []string{"a"}, lease("", 0)))
	must(t, "postpone free", s.PostponeRun(ctx, "free", t0, time.Hour))

	// The clock steps back an hour; another instance looks before the
	// live holder has renewed.
	back := -time.Hour
	asker := lease("two", back+time.Second)
	ids, err := s.Abandoned(ctx, asker, 10, nil)
	must(t, "abandoned just after the step", err)
	if len(ids) != 0 {
		t.Errorf("Abandoned just after a step back = %q, want none: a holder may be alive", ids)
	}
	for _, id := range []string{"dead", "live"} {
		if err := s.AcquireRun(ctx, id, asker); !errors.Is(err, wfstore.ErrLeased) {
			t.Errorf("AcquireRun of %s just after the step: %v, want ErrLeased", id, err)
		}
		if r := load(t, s, id).Run; !r.LeaseExpiry.Equal(asker.Expiry()) {
			t.Errorf("lease of %s after the step until %s, want one lease from the asker's now (%s)", id, r.LeaseExpiry, asker.Expiry())
		}
	}
	// The live holder renews on the stepped clock, every third of a lease.
	for at := back + 20*time.Second; at <= back+80*time.Second; at += 20 * time.Second {
		must(t, "renew live after the step", s.RenewRun(ctx, "live", lease("one", at)))
	}
	later := lease("two", back+90*time.Second)
	ids, err = s.Abandoned(ctx, later, 10, nil)
	must(t, "abandoned a lease after the step", err)
	if !slices.Equal(ids, []string{"dead"}) {
		t.Errorf("Abandoned a lease after a step back of an hour = %q, want [dead]: the lease taken before the step held the run for the step's length", ids)
	}
	must(t, "acquire the dead holder's run", s.AcquireRun(ctx, "dead", later))
	if err := s.AcquireRun(ctx, "live", later); !errors.Is(err, wfstore.ErrLeased) {
		t.Errorf("AcquireRun of a run its holder renews: %v, want ErrLeased", err)
	}
	if r := load(t, s, "free").Run; r.Owner != "" || !r.LeaseExpiry.Equal(t0.Add(time.Hour)) {
		t.Errorf("the postponed run is held by %q until %s, want nobody until %s", r.Owner, r.LeaseExpiry, t0.Add(time.Hour))
	}
}
