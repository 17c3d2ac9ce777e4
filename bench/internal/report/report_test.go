package report

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

func TestSpread(t *testing.T) {
	t.Parallel()
	s := spreadOf([]float64{3, math.NaN(), 1, 2})
	if s.median != 2 || s.min != 1 || s.max != 3 || s.n != 3 {
		t.Errorf("spreadOf = %+v", s)
	}
	if got := spreadOf([]float64{1, 4}).median; got != 2.5 {
		t.Errorf("median of 1, 4 = %v", got)
	}
}

// TestTargetsUseRatiosWithinRounds builds a run where Backstop drains
// 3× River in round 1 and 1× in round 2 and 3: the median ratio (1×)
// decides, not the ratio of medians.
func TestTargetsUseRatiosWithinRounds(t *testing.T) {
	t.Parallel()
	name := func(sys string) string {
		return harness.Case{Store: scenario.Postgres, Scenario: scenario.Drain, System: sys}.Name()
	}
	runs := &harness.Runs{Results: map[string][]scenario.Result{
		name(harness.Backstop):   {{Rate: 300}, {Rate: 100}, {Rate: 200}},
		name(harness.RiverBench): {{Rate: 100}, {Rate: 100}, {Rate: 200}},
	}}
	tg := targets(scenario.Scales["default"])[0]
	v := tg.evaluate(runs)
	if v.values.median != 1 || v.roundsMet != 1 || v.rounds != 3 || !strings.Contains(v.status, "missed") {
		t.Errorf("evaluate = %+v", v)
	}
	runs.Results[name(harness.Backstop)][1].Missing = 1
	runs.Results[name(harness.Backstop)][1].Rate = 1000
	if v := tg.evaluate(runs); !strings.Contains(v.status, "violations") {
		t.Errorf("a case with a lost message: status %q", v.status)
	}
}

func TestWriteRendersEveryCase(t *testing.T) {
	t.Parallel()
	sc := scenario.Scales["small"]
	cases := harness.Cases(sc, []string{scenario.Postgres, scenario.SQLite}, nil)
	runs := &harness.Runs{Results: map[string][]scenario.Result{}, Started: time.Now(), Finished: time.Now()}
	for _, c := range cases {
		runs.Results[c.Name()] = []scenario.Result{{Case: c.Name(), Rate: 10, P50: 1, P99: 2, P999: 3}}
	}
	var b strings.Builder
	(&Document{Runs: runs, Scale: sc, Rounds: 1, Command: "test"}).Write(&b)
	out := b.String()
	for _, want := range []string{"## Targets", "## Ratios on PostgreSQL", "## Absolute figures on SQLite", "river-bench (unordered)"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
