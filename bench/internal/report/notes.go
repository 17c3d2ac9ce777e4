package report

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/bench/internal/riversys"
	"github.com/backstophq/backstop/internal/benchkit/backstopsys"
	"github.com/backstophq/backstop/internal/benchkit/rawsys"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

const howToRun = "```sh\n" +
	"make bench          # this file: every case, 3 rounds, default scale (about two hours here)\n" +
	"make bench-smoke    # every case once at a tiny scale, checks only (well under a minute)\n" +
	"cd bench && go run ./cmd/bench --help\n" +
	"cd bench && go run ./cmd/bench --rounds 3 --stores postgres --cases drain/,latency/   # a subset\n" +
	"```\n\n" +
	"`bench/` is a Go module of its own (`replace github.com/backstophq/backstop => ../`), so Backstop itself " +
	"never depends on River. Each case (store/scenario/system) runs in a fresh process of its own, the command " +
	"re-executing itself, on a fresh PostgreSQL schema or SQLite file; the order of the cases is shuffled in " +
	"every round with the seed below.\n\n"

// scenarioLabel names a scenario with its size at this scale.
func scenarioLabel(sc, store string, s scenario.Scale) string {
	switch sc {
	case scenario.Drain, scenario.DrainLarge:
		return fmt.Sprintf("drain %s", count(s.DrainSize(sc, store)))
	case scenario.Work:
		return "insert-and-work"
	case scenario.WorkOrdered:
		return fmt.Sprintf("insert-and-work, %s strict streams", count(int(s.Streams)))
	case scenario.WorkFailing:
		return fmt.Sprintf("insert-and-work, 1 in %d fails once", s.FailEvery)
	case scenario.Latency:
		return fmt.Sprintf("latency at %d msgs/s", s.LatencyRate)
	case scenario.Enqueue1:
		return "enqueue 1 row/tx"
	case scenario.Enqueue100:
		return "enqueue 100 rows/tx"
	}
	return sc
}

// systemLabel names a system, saying when River runs unordered.
func systemLabel(sys, sc string) string {
	if sc == scenario.WorkOrdered && strings.HasPrefix(sys, "river") {
		return sys + " (unordered)"
	}
	return sys
}

func writeSettings(w io.Writer, s scenario.Scale, analyzed bool) {
	fmt.Fprintf(w, "## What runs\n\n")
	fmt.Fprintf(w, "Every system has a no-op handler that parses the message, counts it and, in the failure scenario, fails "+
		"the first attempt of every %dth message on purpose.\n\n", s.FailEvery)
	fmt.Fprintf(w, "- **backstop**: `relay.New(store, relay.Config{Destinations: {\"bench\": {Transport: transport.Func(noop)}}})` "+
		"on a store opened with a zero `store.Config`: the defaults, never tuned. A deliberate failure is returned as "+
		"`errorhandling.Transient`. One message is written with `Enqueue`; a batch with `EnqueueTx` inside a transaction the "+
		"benchmark begins and commits. slog's default logger is set to WARN on stderr.\n")
	fmt.Fprintf(w, "- **backstop-tuned** (headroom, not what users run): %s.\n", backstopsys.TunedSettings)
	fmt.Fprintf(w, "- **river-bench**: River %s with the settings of River's own benchmark (`river bench`), read from "+
		"`cmd/river/riverbench/river_bench.go` in github.com/riverqueue/river (commit fdf6cdf, the newest snapshot reachable "+
		"here; `cmd/river` itself is not on the Go module proxy): `FetchCooldown` 2 ms, `FetchPollInterval` 20 ms, "+
		"`MaxWorkers` 2,000 on the default queue, jobs inserted with `InsertMany` (its inserter uses batches of 5,000; "+
		"the preloads here do too). Completions are counted from the client's job-completed subscription, as that "+
		"benchmark counts them. A deliberate failure is a returned error, retried by River's default retry policy.\n", modVersion("github.com/riverqueue/river"))
	fmt.Fprintf(w, "- **river-default**: River's defaults (`FetchCooldown` 100 ms, `FetchPollInterval` 1 s); River has no default "+
		"`MaxWorkers`, so 100, the value in River's documentation (`doc.go`). Enqueue uses this client: the settings above change "+
		"only how work is fetched. One job is written with `Insert`, a batch with `InsertMany`.\n")
	fmt.Fprintf(w, "- River on PostgreSQL: `riverpgxv5` %s on a default `pgxpool`; on SQLite: `riversqlite` %s (the newest on the "+
		"proxy) on `modernc.org/sqlite` with one connection, as River's CLI and tests open it, and pragmas `%s` "+
		"(WAL as River's tests set it; synchronous and busy timeout as Backstop's SQLite store). Tables created by `rivermigrate`.\n",
		modVersion("github.com/riverqueue/river/riverdriver/riverpgxv5"), modVersion("github.com/riverqueue/river/riverdriver/riversqlite"),
		riversys.SQLitePragmas)
	fmt.Fprintf(w, "- **raw**: a table `(id bigserial PRIMARY KEY, payload bytea, created_at timestamptz DEFAULT now())` "+
		"(SQLite: `INTEGER PRIMARY KEY`, `BLOB`), written with one `INSERT` statement per transaction (100 rows through "+
		"`unnest($1::bytea[])`, multi-row `VALUES` on SQLite), drained by `DELETE … WHERE id IN (SELECT id … ORDER BY id "+
		"LIMIT n FOR UPDATE SKIP LOCKED) RETURNING id, payload` (no SKIP LOCKED on SQLite): %s. No retries, no streams, "+
		"no latency case.\n\n", rawsys.Settings)
	fmt.Fprintf(w, "Every PostgreSQL case starts after a `CHECKPOINT`, so that the WAL an earlier case wrote is not flushed during it.\n\n")
	fmt.Fprintf(w, "Scenarios at this scale:\n\n")
	fmt.Fprintf(w, "- **enqueue**: %d goroutines each committing one transaction after another for %v (after %v of warm-up); "+
		"no workers. Not checked by a handler: nothing is delivered.\n", s.EnqueueWriters, s.EnqueueFor, s.EnqueueFor/10)
	settle := "a `CHECKPOINT`"
	if analyzed {
		settle = "`VACUUM ANALYZE` of the case's tables and a `CHECKPOINT`"
	}
	fmt.Fprintf(w, "- **drain**: a backlog preloaded (not timed), then on PostgreSQL %s; timed from starting the "+
		"workers until the system has recorded every message done. River's defaults are not run on the 1M drain "+
		"(at most 1,000 jobs/s: 100 workers, a fetch every 100 ms; the 100k drain shows it).", settle)
	if analyzed {
		fmt.Fprintf(w, " Why ANALYZE: this PostgreSQL runs with autovacuum off, and without statistics Backstop's claim "+
			"(1M pending) took 0.3–0.9 s a call: the default relay drained 9,497 of 1M messages in 10 minutes (16 msgs/s), "+
			"while River's benchmark settings drained at 6,120 msgs/s (first run, 2026-11-22; `--analyze=false` reproduces it). "+
			"ANALYZE mid-drain brought the claims under 10 ms.")
	}
	if s.DrainLargeSQLite == 0 && s.DrainLarge > 0 {
		fmt.Fprintf(w, " The 1M drain on SQLite runs only at `--scale large`.")
	}
	fmt.Fprintf(w, "\n- **insert-and-work**: workers started, then %d inserters write %d-row transactions as fast as they can "+
		"for %v. Rate is messages recorded done during the window; backlog is written minus done at its end, also as "+
		"seconds of inserts at the achieved insert rate. Workers then go on for up to %v so that every message written "+
		"can be checked as handled (those left are 'unverified').\n", s.Inserters, s.BatchRows, s.WorkFor, s.VerifyFor)
	fmt.Fprintf(w, "- **strict streams**: the same, messages spread over %d streams, each written in order by one inserter; "+
		"Backstop keeps stream order (checked), River runs unordered (labelled; its out-of-order count is shown, not a violation).\n", s.Streams)
	fmt.Fprintf(w, "- **failures**: the same, the first attempt of 1 in %d messages failing transiently.\n", s.FailEvery)
	fmt.Fprintf(w, "- **latency**: %d msgs/s for %v after %v of warm-up, each in its own transaction started on "+
		"schedule (an open loop); enqueue-to-handler time, from just before the insert.\n\n",
		s.LatencyRate, s.LatencyFor, min(time.Second, s.LatencyFor/4))
	fmt.Fprintf(w, "Checks: every message written must be handled (missing), nothing unwritten may be handled (phantom), the "+
		"system may not count more done than its handler took (recorded unhandled), and Backstop's streams must arrive in order. "+
		"Redeliveries are shown but allowed (at least once).\n\n")
}

func (d *Document) writeMachine(w io.Writer) {
	m := d.Machine
	fmt.Fprintf(w, "## Machine and run\n\n")
	fmt.Fprintf(w, "- CPU: %s, %d cores (/proc/cpuinfo); memory %s; %s\n", m.CPU, m.Cores, m.Memory, m.Kernel)
	fmt.Fprintf(w, "- Go: %s; SQLite %s\n", m.Go, m.SQLite)
	for _, kv := range m.Postgres {
		fmt.Fprintf(w, "- PostgreSQL %s: %s\n", kv[0], kv[1])
	}
	fmt.Fprintf(w, "- Backstop commit: %s\n", m.Commit)
	var loads, busy []float64
	for _, rs := range d.Runs.Results {
		for _, r := range rs {
			loads, busy = append(loads, r.Load), append(busy, 100*r.Busy)
		}
	}
	fmt.Fprintf(w, "- The machine is shared (others' builds and tests run on it). Before each case the run waited up to %v "+
		"for other processes to use under %.0f %% of the CPU; CPU busy just before the cases: median %s %%; one-minute "+
		"load average when they began: median %s (%d cores)\n", d.QuietWait, 100*harness.QuietBusy,
		spreadOf(busy).format("%.0f"), spreadOf(loads).format("%.1f"), m.Cores)
	fmt.Fprintf(w, "- Command: `%s`; scale %s; %d rounds; seed %d\n", d.Command, d.Scale.Name, d.Rounds, d.Seed)
	fmt.Fprintf(w, "- Started %s, finished %s\n\n", d.Runs.Started.UTC().Format("2006-01-02 15:04:05 MST"),
		d.Runs.Finished.UTC().Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(w, "<details><summary>Order of the cases in each round</summary>\n\n")
	for i, o := range d.Runs.Orders {
		fmt.Fprintf(w, "%d. %s\n", i+1, strings.Join(o, ", "))
	}
	fmt.Fprintf(w, "\n</details>\n")
}

// modVersion is the version of module path built into this binary.
func modVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version)"
	}
	for _, dep := range bi.Deps {
		if dep.Path == path {
			return dep.Version
		}
	}
	return "(unknown version)"
}

func sortedNames(runs *harness.Runs) []string {
	names := make([]string, 0, len(runs.Results))
	for n := range runs.Results {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
