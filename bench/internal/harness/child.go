package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/backstophq/backstop/bench/internal/riversys"
	"github.com/backstophq/backstop/internal/benchkit/backstopsys"
	"github.com/backstophq/backstop/internal/benchkit/pgenv"
	"github.com/backstophq/backstop/internal/benchkit/rawsys"
	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// ChildArgs are what the parent tells a child process.
type ChildArgs struct {
	Case  string
	Scale string
	// WorkFor, when positive, replaces the scale's WorkFor (a soak).
	WorkFor time.Duration
	Env     scenario.Env
	Result  string // the file the child writes its Result to, as JSON
	// Analyze runs VACUUM ANALYZE on a PostgreSQL drain's tables after
	// the preload (see settle).
	Analyze bool
}

// RunChild runs one case in this process and writes its Result (with
// Error set when it failed) to args.Result. Logs go to stderr at WARN,
// through slog's default logger, which the relay and River also use.
func RunChild(ctx context.Context, args ChildArgs) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slog.SetDefault(logger)
	res, err := runCase(ctx, args, logger)
	res.Case = args.Case
	if err != nil {
		res.Error = err.Error()
	}
	b, jerr := json.Marshal(res)
	if jerr != nil {
		return jerr
	}
	return os.WriteFile(args.Result, b, 0o644)
}

func runCase(ctx context.Context, args ChildArgs, logger *slog.Logger) (scenario.Result, error) {
	c, err := ParseCase(args.Case)
	if err != nil {
		return scenario.Result{}, err
	}
	sc, err := scenario.ScaleNamed(args.Scale)
	if err != nil {
		return scenario.Result{}, err
	}
	if args.WorkFor > 0 {
		sc.WorkFor = args.WorkFor
	}
	sys, err := openSystem(ctx, c.System, args.Env, logger)
	if err != nil {
		return scenario.Result{}, fmt.Errorf("open %s: %w", c.System, err)
	}
	defer sys.Close()
	var prepare func(context.Context) error
	if args.Env.Store == scenario.Postgres {
		prepare = pgenv.Settle(args.Env.URL, args.Env.Schema, args.Analyze)
	}
	res, err := scenario.Run(ctx, c.Scenario, sys, sc, args.Env.Store, prepare)
	res.Ordered = c.Scenario == scenario.WorkOrdered && (c.System == Backstop || c.System == BackstopTuned)
	return res, err
}

func openSystem(ctx context.Context, name string, env scenario.Env, logger *slog.Logger) (scenario.System, error) {
	switch name {
	case Backstop, BackstopTuned:
		return backstopsys.Open(ctx, env, name == BackstopTuned)
	case RiverBench:
		return riversys.Open(ctx, env, riversys.BenchmarkSettings, logger)
	case RiverDefault:
		return riversys.Open(ctx, env, riversys.DefaultSettings, logger)
	case Raw:
		return rawsys.Open(ctx, env)
	}
	return nil, fmt.Errorf("unknown system %q", name)
}
