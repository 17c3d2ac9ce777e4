package report

import (
	"fmt"
	"math"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// target is a figure Backstop's default configuration must reach: a ratio
// of Backstop's figure to a baseline's (den set) or Backstop's own figure.
type target struct {
	label           string
	store, scenario string
	den             string // baseline system; "" for an absolute figure
	m               metric
	op              string // ">=", "<=" or "<"
	want            float64
}

// targets are those set for the redesign of store/ and relay/. River is
// compared with its benchmark's settings except for enqueue, where the
// client's settings do not touch the insert path.
func targets(sc scenario.Scale) []target {
	pg, lite := scenario.Postgres, scenario.SQLite
	drain := fmt.Sprintf("drain %s on PostgreSQL", count(sc.Drain))
	return []target{
		{drain + " ≥ 2× River (benchmark settings)", pg, scenario.Drain, harness.RiverBench, rateMetric, ">=", 2},
		{drain + " ≥ 0.6× raw claim-and-delete", pg, scenario.Drain, harness.Raw, rateMetric, ">=", 0.6},
		{"insert-and-work completed/s ≥ 2× River (benchmark settings)", pg, scenario.Work, harness.RiverBench, rateMetric, ">=", 2},
		{"insert-and-work backlog left < 1 s of inserts", pg, scenario.Work, "", backlogMetric, "<", 1},
		{fmt.Sprintf("strict order over %s streams ≥ 2× River unordered (benchmark settings)", count(int(sc.Streams))),
			pg, scenario.WorkOrdered, harness.RiverBench, rateMetric, ">=", 2},
		{"latency p50 ≤ River's p50 (benchmark settings)", pg, scenario.Latency, harness.RiverBench, p50Metric, "<=", 1},
		{"latency p50 < 5 ms", pg, scenario.Latency, "", p50Metric, "<", 5},
		{"latency p99 < 50 ms", pg, scenario.Latency, "", p99Metric, "<", 50},
		{"enqueue 1 row/tx ≥ 1.0× River", pg, scenario.Enqueue1, harness.RiverDefault, rateMetric, ">=", 1},
		{"enqueue 1 row/tx ≥ 0.9× raw INSERT", pg, scenario.Enqueue1, harness.Raw, rateMetric, ">=", 0.9},
		{"enqueue 100 rows/tx ≥ 2× River", pg, scenario.Enqueue100, harness.RiverDefault, rateMetric, ">=", 2},
		{"enqueue 100 rows/tx ≥ 0.6× raw INSERT", pg, scenario.Enqueue100, harness.Raw, rateMetric, ">=", 0.6},
		{fmt.Sprintf("SQLite drain %s ≥ 5× River's SQLite driver (benchmark settings)", count(sc.Drain)),
			lite, scenario.Drain, harness.RiverBench, rateMetric, ">=", 5},
	}
}

// verdict is a target's outcome over the rounds.
type verdict struct {
	values    spread
	roundsMet int
	rounds    int
	status    string // "met", "missed", "not measured", or "missed (…)"
}

func (t target) evaluate(runs *harness.Runs) verdict {
	name := harness.Case{Store: t.store, Scenario: t.scenario, System: harness.Backstop}.Name()
	var vals []float64
	if t.den == "" {
		if has(runs, t.store, t.scenario, harness.Backstop) {
			vals = perRound(runs, name, t.m)
		}
	} else if has(runs, t.store, t.scenario, t.den) {
		vals = ratio{store: t.store, scenario: t.scenario, num: harness.Backstop, den: t.den, m: t.m}.rounds(runs)
	}
	v := verdict{values: spreadOf(vals)}
	for _, x := range vals {
		if !math.IsNaN(x) {
			v.rounds++
			if t.holds(x) {
				v.roundsMet++
			}
		}
	}
	switch {
	case v.rounds == 0:
		v.status = "not measured"
	case violations(runs, name) > 0:
		v.status = "**missed** (correctness violations)"
	case t.holds(v.values.median):
		v.status = "met"
	default:
		v.status = "**missed**"
	}
	return v
}

func (t target) holds(x float64) bool {
	switch t.op {
	case ">=":
		return x >= t.want
	case "<=":
		return x <= t.want
	default:
		return x < t.want
	}
}

// wanted formats the threshold: "≥ 2×" for a ratio, "< 5 ms" for a figure.
func (t target) wanted() string {
	op := map[string]string{">=": "≥", "<=": "≤", "<": "<"}[t.op]
	if t.den != "" {
		return fmt.Sprintf("%s %g×", op, t.want)
	}
	return fmt.Sprintf("%s %g %s", op, t.want, t.m.unit)
}

// violations sums the violations of case name over its rounds.
func violations(runs *harness.Runs, name string) int64 {
	var n int64
	for _, r := range runs.Results[name] {
		n += r.Violations()
	}
	return n
}

// count formats n as 100k or 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
