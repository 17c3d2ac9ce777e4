// Package harness runs the benchmark's cases: each in a process of its
// own (the bench command re-executing itself), in rounds whose order is
// shuffled with a seed, on a fresh PostgreSQL schema or SQLite directory.
package harness

import (
	"fmt"
	"slices"
	"strings"

	"github.com/backstophq/backstop/internal/benchkit/rawsys"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// The systems under test.
const (
	Backstop      = "backstop"       // default relay.Config and zero store.Config
	BackstopTuned = "backstop-tuned" // backstopsys's tuned settings
	RiverBench    = "river-bench"    // River with its benchmark's settings
	RiverDefault  = "river-default"  // River with its defaults
	Raw           = "raw"            // the raw SQL baseline
)

// Systems lists the systems in the order reports show them.
var Systems = []string{Backstop, BackstopTuned, RiverBench, RiverDefault, Raw}

// Case is one system running one scenario on one store.
type Case struct {
	Store, Scenario, System string
}

// Name is store/scenario/system, the name --cases filters on.
func (c Case) Name() string { return c.Store + "/" + c.Scenario + "/" + c.System }

// ParseCase is the inverse of Name.
func ParseCase(name string) (Case, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return Case{}, fmt.Errorf("bad case name %q (want store/scenario/system)", name)
	}
	return Case{Store: parts[0], Scenario: parts[1], System: parts[2]}, nil
}

// systemsFor returns the systems that run scenario. Enqueue is measured
// without workers, so the tuned relay and River's benchmark settings (which
// change only how work is fetched) would measure the same insert path
// again; raw has no retries and no streams.
func systemsFor(name string) []string {
	var out []string
	switch name {
	case scenario.Enqueue1, scenario.Enqueue100:
		out = []string{Backstop, RiverDefault}
	case scenario.DrainLarge:
		// River's defaults work at most 1,000 jobs a second (100 workers,
		// a fetch every 100 ms): 17 minutes a round for 1M, and a figure
		// the 100k drain already gives.
		out = []string{Backstop, BackstopTuned, RiverBench}
	default:
		out = []string{Backstop, BackstopTuned, RiverBench, RiverDefault}
	}
	if rawsys.Runs(name) {
		out = append(out, Raw)
	}
	return out
}

// Cases lists every case on stores at scale sc, keeping only those whose
// name contains one of filters (all when filters is empty).
func Cases(sc scenario.Scale, stores, filters []string) []Case {
	var out []Case
	for _, st := range stores {
		for _, name := range scenario.Names {
			if (name == scenario.Drain || name == scenario.DrainLarge) && sc.DrainSize(name, st) == 0 {
				continue
			}
			for _, sys := range systemsFor(name) {
				c := Case{Store: st, Scenario: name, System: sys}
				if matches(c.Name(), filters) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// matches reports whether name is selected by filters: a filter matches
// the names that contain it, or, ending in "$", the names that end with
// the rest of it ("drain/backstop$" leaves out "drain/backstop-tuned").
func matches(name string, filters []string) bool {
	return len(filters) == 0 || slices.ContainsFunc(filters, func(f string) bool {
		if rest, ok := strings.CutSuffix(f, "$"); ok {
			return rest != "" && strings.HasSuffix(name, rest)
		}
		return f != "" && strings.Contains(name, f)
	})
}
