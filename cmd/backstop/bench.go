package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/benchkit/backstopsys"
	"github.com/backstophq/backstop/internal/benchkit/pgenv"
	"github.com/backstophq/backstop/internal/benchkit/rawsys"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// The systems backstop bench runs.
const (
	benchBackstop = "backstop"
	benchTuned    = "backstop-tuned"
	benchRaw      = "raw"
)

// benchDefaultScenarios is what bench runs without --scenarios: every
// scenario but the 1M drain.
var benchDefaultScenarios = []string{scenario.Enqueue1, scenario.Enqueue100, scenario.Drain,
	scenario.Work, scenario.WorkOrdered, scenario.WorkFailing, scenario.Latency}

// benchCase is one scenario run by one system in one round.
type benchCase struct {
	scenario, system string
	round            int
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		scenarios, systems, scale, cpuProfile string
		rounds                                int
		analyze                               bool
		workFor                               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Backstop's throughput and latency on a database, against raw SQL on the same one",
		Long: `bench runs Backstop's benchmark scenarios with the relay's default
configuration, and the same scenarios as plain SQL on a table of its own
(single-row and 100-row INSERTs, a SKIP LOCKED claim-and-delete loop), on the
database --db names: a postgres:// URL runs every case in a fresh schema of
its own, dropped afterwards; anything else runs on SQLite files in a
temporary directory. Cases run one after another in this process, in a
shuffled order each round; the report gives each figure's median and spread
over the rounds and Backstop's ratio to raw SQL, taken within each round.

Scenarios: enqueue-1 and enqueue-100 (4 writers, 1 or 100 rows a
transaction), drain (a preloaded backlog; drain-large is 1M), work (2
writers of 100-row transactions while the relay works), work-ordered (the
same over 10,000 strict streams), work-failing (1 in 20 first attempts
failing), latency (200 messages a second, enqueue to handler). Every
message is checked: lost, phantom, recorded unhandled and, in ordered
scenarios, out of order; bench exits with an error if a check fails.

The comparison with River, each case in a process of its own, is make bench
in the source tree (bench/ is a module of its own, so Backstop does not
depend on River).`,
		Example: `  backstop bench --scale small
  backstop bench --db postgres://postgres@127.0.0.1:5432/test --scenarios drain,latency --rounds 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := scenario.ScaleNamed(scale)
			if err != nil {
				return fmt.Errorf("--scale: %w", err)
			}
			if workFor < 0 {
				return fmt.Errorf("--work-for must not be negative, got %s", workFor)
			}
			if workFor > 0 {
				sc.WorkFor = workFor
			}
			names, err := benchList("--scenarios", scenarios, scenario.Names)
			if err != nil {
				return err
			}
			syss, err := benchList("--systems", systems, []string{benchBackstop, benchTuned, benchRaw})
			if err != nil {
				return err
			}
			if rounds < 1 {
				return fmt.Errorf("--rounds must be at least 1, got %d", rounds)
			}
			store, url := scenario.SQLite, ""
			if strings.HasPrefix(g.db, "postgres://") || strings.HasPrefix(g.db, "postgresql://") {
				store, url = scenario.Postgres, g.db
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer stop()
			}
			// The relay logs each case's start and stop at INFO; only
			// warnings and errors are worth showing here. The cases get
			// this logger; the process's default stays as it is.
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			b := &bench{out: cmd.OutOrStdout(), log: log, store: store, url: url, scale: sc, analyze: analyze}
			return b.run(cmd.Context(), names, syss, rounds)
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenarios, "scenarios", strings.Join(benchDefaultScenarios, ","), "comma-separated scenarios: "+strings.Join(scenario.Names, ", "))
	f.StringVar(&systems, "systems", benchBackstop+","+benchRaw, "comma-separated systems: backstop (defaults), backstop-tuned, raw")
	f.StringVar(&scale, "scale", "default", "small (seconds), default or large")
	f.IntVar(&rounds, "rounds", 1, "how many times each case runs")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process over the whole run, set-up included, to this file (go tool pprof reads it)")
	f.DurationVar(&workFor, "work-for", 0, "how long the insert-and-work scenarios insert, instead of the scale's (a soak: past the lease duration, leases of deleted rows lapse in the index)")
	f.BoolVar(&analyze, "analyze", true, "VACUUM ANALYZE a PostgreSQL drain's backlog before timing it, as autovacuum would")
	return cmd
}

// startCPUProfile starts profiling this process's CPU into path and
// returns what stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// benchRuns says whether system runs scenario (rawsys.Runs for raw SQL).
func benchRuns(name, system string) bool {
	return system != benchRaw || rawsys.Runs(name)
}

// benchList splits a comma-separated flag value and checks each item is
// one of known.
func benchList(flag, value string, known []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(value, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("%s: unknown %q (one of %s)", flag, s, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is empty", flag)
	}
	return out, nil
}

// bench runs cases and reports them.
type bench struct {
	out     io.Writer
	log     *slog.Logger // the systems' logs
	store   string       // scenario.Postgres or scenario.SQLite
	url     string       // PostgreSQL
	scale   scenario.Scale
	analyze bool
}

func (b *bench) run(ctx context.Context, names, systems []string, rounds int) error {
	var cases []benchCase
	for r := range rounds {
		var round []benchCase
		for _, n := range names {
			if b.scale.DrainSize(n, b.store) == 0 && (n == scenario.Drain || n == scenario.DrainLarge) {
				continue // drain-large does not run on SQLite at this scale
			}
			for _, s := range systems {
				if benchRuns(n, s) {
					round = append(round, benchCase{scenario: n, system: s, round: r})
				}
			}
		}
		rand.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		cases = append(cases, round...)
	}
	fmt.Fprintf(b.out, "backstop bench: %d cases on %s, scale %s, %d round(s)\n", len(cases), b.store, b.scale.Name, rounds)
	results := map[benchCase]scenario.Result{}
	failed := 0
	for i, c := range cases {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := b.runCase(ctx, c, i)
		if err != nil {
			res.Error = err.Error()
		}
		results[c] = res
		status := "ok"
		switch {
		case res.Error != "":
			status, failed = "FAILED: "+res.Error, failed+1
		case res.Violations() > 0:
			status, failed = fmt.Sprintf("FAILED checks: %d missing, %d phantoms, %d unhandled, %d out of order",
				res.Missing, res.Phantoms, res.Unhandled, res.OutOfOrder), failed+1
		}
		fmt.Fprintf(b.out, "[%d/%d] round %d %s/%s: %.0f msgs/s%s %s\n", i+1, len(cases), c.round+1, c.scenario, c.system,
			res.Rate, benchLatency(res), status)
	}
	b.report(results, names, systems, rounds)
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(cases))
	}
	return nil
}

// runCase runs c in an environment of its own.
func (b *bench) runCase(ctx context.Context, c benchCase, i int) (scenario.Result, error) {
	env := scenario.Env{Store: b.store, URL: b.url, Logger: b.log}
	var settle func(context.Context) error
	if b.store == scenario.Postgres {
		env.Schema = fmt.Sprintf("backstop_cli_bench_%d_%d", os.Getpid(), i)
		if err := pgenv.Create(ctx, b.url, env.Schema); err != nil {
			return scenario.Result{}, err
		}
		defer pgenv.Drop(context.WithoutCancel(ctx), b.url, env.Schema)
		settle = pgenv.Settle(b.url, env.Schema, b.analyze)
	} else {
		dir, err := os.MkdirTemp("", "backstop-bench-")
		if err != nil {
			return scenario.Result{}, err
		}
		defer os.RemoveAll(dir)
		env.Dir = dir
	}
	var (
		sys scenario.System
		err error
	)
	switch c.system {
	case benchBackstop, benchTuned:
		sys, err = backstopsys.Open(ctx, env, c.system == benchTuned)
	case benchRaw:
		sys, err = rawsys.Open(ctx, env)
	}
	if err != nil {
		return scenario.Result{}, fmt.Errorf("open %s: %w", c.system, err)
	}
	defer sys.Close()
	res, err := scenario.Run(ctx, c.scenario, sys, b.scale, b.store, settle)
	res.Ordered = c.scenario == scenario.WorkOrdered && c.system != benchRaw
	return res, err
}

func benchLatency(r scenario.Result) string {
	if r.P50 == 0 {
		return ""
	}
	return fmt.Sprintf(", p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms", r.P50, r.P99, r.P999)
}

// report prints, per scenario and system, the median and spread over
// rounds, and Backstop's ratio to raw SQL taken within each round.
func (b *bench) report(results map[benchCase]scenario.Result, names, systems []string, rounds int) {
	w := tabwriter.NewWriter(b.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(b.out)
	fmt.Fprintln(w, "scenario\tsystem\tmsgs/s median [min-max]\tp50 ms\tp99 ms\tp99.9 ms\tbacklog left (s of inserts)\tchecks")
	for _, n := range names {
		for _, s := range systems {
			var rs []scenario.Result
			for r := range rounds {
				if res, ok := results[benchCase{n, s, r}]; ok && res.Error == "" {
					rs = append(rs, res)
				}
			}
			if len(rs) == 0 {
				continue
			}
			field := func(get func(scenario.Result) float64, format string) string {
				v := make([]float64, len(rs))
				for i, r := range rs {
					v[i] = get(r)
				}
				med, lo, hi := benchSpread(v)
				if med == 0 {
					return ""
				}
				if len(v) == 1 {
					return fmt.Sprintf(format, med)
				}
				return fmt.Sprintf(format+" ["+format+"-"+format+"]", med, lo, hi)
			}
			checks := "ok"
			for _, r := range rs {
				if r.Violations() > 0 {
					checks = "FAILED"
				}
			}
			backlog := ""
			if n == scenario.Work || n == scenario.WorkOrdered || n == scenario.WorkFailing {
				backlog = field(func(r scenario.Result) float64 { return r.BacklogSeconds }, "%.2f")
				if backlog == "" {
					backlog = "0"
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, s,
				field(func(r scenario.Result) float64 { return r.Rate }, "%.0f"),
				field(func(r scenario.Result) float64 { return r.P50 }, "%.2f"),
				field(func(r scenario.Result) float64 { return r.P99 }, "%.2f"),
				field(func(r scenario.Result) float64 { return r.P999 }, "%.2f"),
				backlog, checks)
		}
	}
	w.Flush()
	if !slices.Contains(systems, benchBackstop) || !slices.Contains(systems, benchRaw) {
		return
	}
	fmt.Fprintln(b.out)
	fmt.Fprintln(w, "scenario\tbackstop / raw, median [min-max] over rounds")
	for _, n := range names {
		var ratios []float64
		for r := range rounds {
			bs, ok1 := results[benchCase{n, benchBackstop, r}]
			raw, ok2 := results[benchCase{n, benchRaw, r}]
			if ok1 && ok2 && bs.Error == "" && raw.Error == "" && raw.Rate > 0 {
				ratios = append(ratios, bs.Rate/raw.Rate)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		med, lo, hi := benchSpread(ratios)
		fmt.Fprintf(w, "%s\t%.2fx [%.2f-%.2f]\n", n, med, lo, hi)
	}
	w.Flush()
	fmt.Fprintf(b.out, "\n(%s; each case ran in this process, one after another)\n", time.Now().UTC().Format(time.RFC3339))
}

// benchSpread returns the median, minimum and maximum of v.
func benchSpread(v []float64) (med, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}
