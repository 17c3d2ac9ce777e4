package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/backstophq/backstop/internal/benchkit/pgenv"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// ChildFlag is the hidden first argument that makes the bench command run
// one case instead of the whole benchmark.
const ChildFlag = "--run-case"

// Options configure a benchmark run.
type Options struct {
	// Exe is the bench command's executable, re-executed once per case.
	Exe string
	// Cases are the cases to run, every round.
	Cases []Case
	// Rounds is how many times each case runs; each round shuffles the
	// order of the cases with Seed.
	Rounds int
	Seed   uint64
	// Scale sizes the scenarios.
	Scale scenario.Scale
	// PostgresURL is the server of the PostgreSQL cases.
	PostgresURL string
	// Analyze runs VACUUM ANALYZE on a PostgreSQL drain's preloaded tables
	// before the clock starts (see settle).
	Analyze bool
	// QuietWait is how long to wait before each case for other processes
	// to leave the CPU (see waitQuiet); 0 does not wait.
	QuietWait time.Duration
	// Log receives progress lines and the children's output.
	Log io.Writer
}

// Runs holds the results of every case in every round.
type Runs struct {
	// Results maps a case's name to its result in each round (index 0 is
	// round 1); a result's Error is set when the case failed.
	Results map[string][]scenario.Result
	// Orders lists the case names of each round in the order they ran.
	Orders [][]string
	// Started and Finished bound the run.
	Started, Finished time.Time
}

// Run runs every case of opts in opts.Rounds rounds, each case in a child
// process of its own.
func Run(ctx context.Context, opts Options) (*Runs, error) {
	runs := &Runs{Results: make(map[string][]scenario.Result), Started: time.Now()}
	for _, c := range opts.Cases {
		runs.Results[c.Name()] = make([]scenario.Result, opts.Rounds)
	}
	total := len(opts.Cases) * opts.Rounds
	done := 0
	for round := range opts.Rounds {
		order := roundOrder(opts.Cases, opts.Seed, round)
		names := make([]string, len(order))
		for i, c := range order {
			names[i] = c.Name()
		}
		runs.Orders = append(runs.Orders, names)
		for _, c := range order {
			if err := ctx.Err(); err != nil {
				return runs, err
			}
			done++
			fmt.Fprintf(opts.Log, "bench: [%d/%d] round %d %s\n", done, total, round+1, c.Name())
			busy := waitQuiet(opts.QuietWait)
			t0, load := time.Now(), loadAverage()
			res := runOne(ctx, opts, c, round)
			res.Load, res.Busy = load, busy
			runs.Results[c.Name()][round] = res
			fmt.Fprintf(opts.Log, "bench:   %s [%.1f s]\n", oneLine(res), time.Since(t0).Seconds())
		}
	}
	runs.Finished = time.Now()
	return runs, nil
}

// Failures lists the cases that failed, or whose checks found a
// violation, in any round.
func (r *Runs) Failures() []string {
	var out []string
	for name, rs := range r.Results {
		for i, res := range rs {
			if res.Error != "" || res.Violations() > 0 {
				out = append(out, fmt.Sprintf("%s round %d: %s", name, i+1, oneLine(res)))
			}
		}
	}
	slices.Sort(out)
	return out
}

// roundOrder is the order of the cases in round: a shuffle seeded by the
// run's seed and the round, so that no case always runs first, last, or
// after the same neighbour, and a run can be repeated exactly.
func roundOrder(cases []Case, seed uint64, round int) []Case {
	out := append([]Case(nil), cases...)
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// runOne runs case c of round in a child process and returns its result;
// a child that fails to report gives a result with Error set.
func runOne(ctx context.Context, opts Options, c Case, round int) scenario.Result {
	res, err := spawn(ctx, opts, c, round)
	if err != nil {
		return scenario.Result{Case: c.Name(), Error: err.Error()}
	}
	return res
}

func spawn(ctx context.Context, opts Options, c Case, round int) (scenario.Result, error) {
	dir, err := os.MkdirTemp("", "backstop-bench-*")
	if err != nil {
		return scenario.Result{}, err
	}
	defer os.RemoveAll(dir)
	env := scenario.Env{Store: c.Store}
	switch c.Store {
	case scenario.Postgres:
		env.URL, env.Schema = opts.PostgresURL, schemaFor(c, round)
		if err := pgenv.Checkpoint(ctx, env.URL); err != nil {
			return scenario.Result{}, err
		}
		if err := pgenv.Create(ctx, env.URL, env.Schema); err != nil {
			return scenario.Result{}, err
		}
		defer pgenv.Drop(context.WithoutCancel(ctx), env.URL, env.Schema)
	case scenario.SQLite:
		env.Dir = dir
	default:
		return scenario.Result{}, fmt.Errorf("unknown store %q", c.Store)
	}
	resultFile := filepath.Join(dir, "result.json")
	ctx, cancel := context.WithTimeout(ctx, caseTimeout(opts.Scale))
	defer cancel()
	cmd := exec.CommandContext(ctx, opts.Exe, ChildFlag, c.Name(),
		"--scale", opts.Scale.Name, "--postgres", env.URL, "--schema", env.Schema,
		"--dir", env.Dir, "--result", resultFile, fmt.Sprintf("--analyze=%t", opts.Analyze),
		"--work-for", opts.Scale.WorkFor.String())
	cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	runErr := cmd.Run()
	b, err := os.ReadFile(resultFile)
	if err != nil {
		if runErr != nil {
			return scenario.Result{}, fmt.Errorf("child: %w", runErr)
		}
		return scenario.Result{}, fmt.Errorf("child wrote no result: %w", err)
	}
	var res scenario.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return scenario.Result{}, fmt.Errorf("child result: %w", err)
	}
	return res, nil
}

// loadAverage is the one-minute load average, or 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(b), &l)
	return l
}

// caseTimeout bounds one child process: its longest wait plus setup.
func caseTimeout(sc scenario.Scale) time.Duration {
	return sc.DrainTimeout + sc.WorkFor + sc.VerifyFor + 5*time.Minute
}

// oneLine summarises res for the progress log.
func oneLine(res scenario.Result) string {
	s := fmt.Sprintf("%.0f msg/s", res.Rate)
	if res.P50 > 0 {
		s += fmt.Sprintf(", p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms", res.P50, res.P99, res.P999)
	}
	if res.InsertRate > 0 {
		s += fmt.Sprintf(", inserted %.0f/s, backlog %d (%.2f s)", res.InsertRate, res.Backlog, res.BacklogSeconds)
	}
	if v := res.Violations(); v > 0 {
		s += fmt.Sprintf(", VIOLATIONS %d (missing %d, out of order %d, phantom %d)", v, res.Missing, res.OutOfOrder, res.Phantoms)
	} else if res.OutOfOrder > 0 {
		s += fmt.Sprintf(", %d out of order (not promised)", res.OutOfOrder)
	}
	if res.Unverified > 0 {
		s += fmt.Sprintf(", %d unverified", res.Unverified)
	}
	if res.Duplicates > 0 {
		s += fmt.Sprintf(", %d duplicates", res.Duplicates)
	}
	if res.Partial != "" {
		s += ", PARTIAL: " + res.Partial
	}
	if res.Error != "" {
		s += ", ERROR " + res.Error
	}
	return s
}
