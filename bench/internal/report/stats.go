package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// metric reads one figure of a result.
type metric struct {
	name   string
	lower  bool // lower is better
	unit   string
	value  func(*scenario.Result) float64
	format string
}

var (
	rateMetric    = metric{name: "msgs/s", unit: "msgs/s", value: func(r *scenario.Result) float64 { return r.Rate }, format: "%.0f"}
	p50Metric     = metric{name: "p50", lower: true, unit: "ms", value: func(r *scenario.Result) float64 { return r.P50 }, format: "%.2f"}
	p99Metric     = metric{name: "p99", lower: true, unit: "ms", value: func(r *scenario.Result) float64 { return r.P99 }, format: "%.2f"}
	backlogMetric = metric{name: "backlog", lower: true, unit: "s of inserts", value: func(r *scenario.Result) float64 { return r.BacklogSeconds }, format: "%.2f"}
)

// spread is a median with the minimum and maximum it was taken from.
type spread struct {
	median, min, max float64
	n                int
}

func spreadOf(vs []float64) spread {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return spread{median: math.NaN(), min: math.NaN(), max: math.NaN()}
	}
	slices.Sort(vs)
	m := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return spread{median: m, min: vs[0], max: vs[len(vs)-1], n: len(vs)}
}

// String formats s as "median [min–max]".
func (s spread) format(f string) string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 {
		return fmt.Sprintf(f, s.median)
	}
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", s.median, s.min, s.max)
}

// perRound returns m of case name in each round, NaN where it failed.
func perRound(runs *harness.Runs, name string, m metric) []float64 {
	rs := runs.Results[name]
	out := make([]float64, len(rs))
	for i := range rs {
		out[i] = math.NaN()
		if rs[i].Error == "" {
			out[i] = m.value(&rs[i])
		}
	}
	return out
}

// ratio is one system's figure over a baseline's, round by round.
type ratio struct {
	store, scenario string
	num, den        string
	m               metric
}

func (r ratio) label() string {
	s := fmt.Sprintf("%s / %s", r.num, r.den)
	if r.m.name != rateMetric.name {
		s += " (" + r.m.name + ", lower is better)"
	}
	return s
}

// rounds returns the ratio in each round: both cases ran in the same
// round, so they saw the same machine state as closely as we can arrange.
func (r ratio) rounds(runs *harness.Runs) []float64 {
	num := perRound(runs, harness.Case{Store: r.store, Scenario: r.scenario, System: r.num}.Name(), r.m)
	den := perRound(runs, harness.Case{Store: r.store, Scenario: r.scenario, System: r.den}.Name(), r.m)
	if num == nil || den == nil {
		return nil
	}
	out := make([]float64, len(num))
	for i := range num {
		out[i] = num[i] / den[i]
		if den[i] == 0 || math.IsInf(out[i], 0) {
			out[i] = math.NaN()
		}
	}
	return out
}

// ratios lists the ratios the report prints for store: Backstop's
// default against every baseline, the tuned variant against River's
// benchmark settings and raw SQL, on rate (p50 and p99 for latency).
func ratios(runs *harness.Runs, store string) []ratio {
	var out []ratio
	for _, sc := range scenario.Names {
		ms := []metric{rateMetric}
		if sc == scenario.Latency {
			ms = []metric{p50Metric, p99Metric}
		}
		for _, num := range []string{harness.Backstop, harness.BackstopTuned} {
			for _, den := range []string{harness.RiverBench, harness.RiverDefault, harness.Raw} {
				if num == harness.BackstopTuned && den == harness.RiverDefault {
					continue
				}
				for _, m := range ms {
					r := ratio{store: store, scenario: sc, num: num, den: den, m: m}
					if has(runs, r.store, r.scenario, r.num) && has(runs, r.store, r.scenario, r.den) {
						out = append(out, r)
					}
				}
			}
		}
	}
	return out
}

func has(runs *harness.Runs, store, sc, sys string) bool {
	_, ok := runs.Results[harness.Case{Store: store, Scenario: sc, System: sys}.Name()]
	return ok
}
