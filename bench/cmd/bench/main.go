// Command bench measures Backstop against River and raw SQL baselines on
// PostgreSQL and SQLite, each case in a process of its own, in shuffled
// rounds, and prints (and with --out writes) the figures and their ratios.
//
//	cd bench && go run ./cmd/bench --rounds 3 --out ../BENCHMARKS.md
//
// The flags are listed by --help. The command re-executes itself with a
// hidden first argument to run one case; that mode is not for people.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/bench/internal/report"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == harness.ChildFlag {
		err = child(ctx, os.Args[2:])
	} else {
		err = parent(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parent(ctx context.Context, argv []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	rounds := fs.Int("rounds", 3, "how many times each case runs, in a shuffled order each round")
	scaleName := fs.String("scale", "default", "small (CI smoke run), default (the published figures) or large")
	cases := fs.String("cases", "", "comma-separated substrings of case names (store/scenario/system) to run, a trailing $ anchoring one at the end of the name; empty runs all")
	stores := fs.String("stores", "postgres,sqlite", "comma-separated stores: postgres, sqlite")
	out := fs.String("out", "", "also write the report to this Markdown file (e.g. ../BENCHMARKS.md)")
	pgURL := fs.String("postgres", envOr("BACKSTOP_TEST_POSTGRES_URL", defaultPostgres), "PostgreSQL URL (trust auth, database test)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the rounds' shuffled order")
	analyze := fs.Bool("analyze", true, "VACUUM ANALYZE a PostgreSQL drain's backlog before timing it, as autovacuum would")
	workFor := fs.Duration("work-for", 0, "how long the insert-and-work scenarios insert, instead of the scale's (a soak: past the lease duration, where dead rows pile up between vacuums)")
	quiet := fs.Duration("quiet-wait", 90*time.Second, "before each case, wait up to this long for other processes to use under 25% of the CPU")
	list := fs.Bool("list", false, "list the cases and exit")
	check := fs.Bool("check", false, "exit with status 1 if a case failed or a check found a violation (for CI)")
	saveJSON := fs.String("json", "", "also save the raw results to this file, for --from")
	from := fs.String("from", "", "do not run: rewrite the report from results saved with --json")
	_ = fs.Parse(argv)

	if *from != "" {
		doc, err := load(*from)
		if err != nil {
			return err
		}
		return emit(doc, *out, "")
	}
	sc, err := scenario.ScaleNamed(*scaleName)
	if err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("--rounds must be at least 1")
	}
	if *workFor < 0 {
		return fmt.Errorf("--work-for must not be negative")
	}
	if *workFor > 0 {
		sc.WorkFor = *workFor
	}
	all := harness.Cases(sc, split(*stores), split(*cases))
	if *list || len(all) == 0 {
		for _, c := range all {
			fmt.Println(c.Name())
		}
		if len(all) == 0 {
			return fmt.Errorf("no case matches --stores %q --cases %q", *stores, *cases)
		}
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	info := report.Gather(ctx, *pgURL, strings.Contains(*stores, scenario.Postgres))
	runs, err := harness.Run(ctx, harness.Options{
		Exe: exe, Cases: all, Rounds: *rounds, Seed: *seed, Scale: sc,
		PostgresURL: *pgURL, Analyze: *analyze, QuietWait: *quiet, Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	doc := &report.Document{
		Runs: runs, Scale: sc, Rounds: *rounds, Seed: *seed, Machine: info, Analyze: *analyze, QuietWait: *quiet,
		Command: "cd bench && go run ./cmd/bench " + strings.Join(argv, " "),
		Via:     os.Getenv("BENCH_VIA"),
	}
	if err := emit(doc, *out, *saveJSON); err != nil {
		return err
	}
	if bad := runs.Failures(); *check && len(bad) > 0 {
		return fmt.Errorf("%d case(s) failed or found violations:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	return nil
}

// emit prints doc's report, writes it to out and saves doc as JSON to
// saveJSON, each when set.
func emit(doc *report.Document, out, saveJSON string) error {
	if saveJSON != "" {
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(saveJSON, b, 0o644); err != nil {
			return err
		}
	}
	var b strings.Builder
	doc.Write(&b)
	fmt.Print(b.String())
	if out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "bench: wrote", out)
	}
	return nil
}

// load reads a Document saved with --json.
func load(path string) (*report.Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc report.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &doc, nil
}

func child(ctx context.Context, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%s needs a case name", harness.ChildFlag)
	}
	fs := flag.NewFlagSet("bench "+harness.ChildFlag, flag.ContinueOnError)
	var a harness.ChildArgs
	a.Case = argv[0]
	fs.StringVar(&a.Scale, "scale", "default", "")
	fs.StringVar(&a.Env.URL, "postgres", "", "")
	fs.StringVar(&a.Env.Schema, "schema", "", "")
	fs.StringVar(&a.Env.Dir, "dir", "", "")
	fs.StringVar(&a.Result, "result", "", "")
	fs.BoolVar(&a.Analyze, "analyze", true, "")
	fs.DurationVar(&a.WorkFor, "work-for", 0, "")
	if err := fs.Parse(argv[1:]); err != nil {
		return err
	}
	c, err := harness.ParseCase(a.Case)
	if err != nil {
		return err
	}
	a.Env.Store = c.Store
	return harness.RunChild(ctx, a)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
