package workflow_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// The crash tests re-execute the test binary as a child that runs the
// crash DAG on a store named by crashEnv ("sqlite:<file>" or
// "postgres:<schema>"), prints childReady from inside task c, and blocks
// there until the parent kills it with SIGKILL.
const (
	crashEnv   = "BACKSTOP_WF_CRASH_CHILD"
	childReady = "BACKSTOP-WF-CHILD-READY"
)

// crashDAG is a -> (b, e) -> c -> d. Each task writes one outbox message
// of type crash.<id> with its success and sets a result; d checks the
// results it reads. hook runs in each task before it returns.
func crashDAG(t *testing.T, hook func(ctx context.Context, id string) error) *workflow.DAG {
	task := func(id string, up ...string) workflow.Task {
		return workflow.Task{ID: id, Upstream: up, Run: func(ctx context.Context, tc *workflow.TaskContext) error {
			if err := tc.Enqueue(&outbox.Message{Destination: "ledger", Type: "crash." + id}); err != nil {
				return err
			}
			if id == "d" {
				var c string
				if err := tc.Result("c", &c); err != nil || c != "c done" {
					return fmt.Errorf("d read c's result %q, %v", c, err)
				}
			}
			if err := tc.SetResult(id + " done"); err != nil {
				return err
			}
			return hook(ctx, id)
		}}
	}
	d, err := workflow.NewDAG("crash", nil, task("a"), task("b", "a"), task("e", "a"), task("c", "b", "e"), task("d", "c"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openCrashStore opens the workflow store a crash spec names, and a
// function counting outbox messages of a type.
func openCrashStore(t testing.TB, spec string) (wfstore.Store, func(typ string) int) {
	t.Helper()
	ctx := context.Background()
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "sqlite":
		st, ws := openSQLite(t, arg)
		return ws, func(typ string) int {
			var n int
			if err := st.DB().QueryRow(`SELECT count(*) FROM backstop_outbox WHERE type = ?`, typ).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	case "postgres":
		// The engines' clocks judge the leases (store.Config.Clock set):
		// the test takes over the killed child's run by moving a fake
		// clock past its lease, not by waiting it out.
		st, err := postgres.Open(ctx, testenv.PostgresURL(), store.Config{Clock: clock.Real}, postgres.WithSchema(arg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		ws, err := wfpostgres.New(ctx, st, wfpostgres.WithSchema(arg))
		if err != nil {
			t.Fatal(err)
		}
		return ws, func(typ string) int {
			var n int
			q := `SELECT count(*) FROM ` + arg + `.backstop_outbox WHERE type = $1`
			if err := st.Pool().QueryRow(ctx, q, typ).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("bad crash spec %q", spec)
	return nil, nil
}

// TestCrashChild is the child process of the crash tests; it skips
// unless started by them.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("runs only as the child process of the crash tests")
	}
	ws, _ := openCrashStore(t, spec)
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "child", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d := crashDAG(t, func(ctx context.Context, id string) error {
		if id == "c" {
			fmt.Println(childReady)
			select {} // until killed
		}
		return nil
	})
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	_, err = e.Run(context.Background(), "crash", workflow.RunOptions{ID: "crash-run"})
	t.Fatalf("the run returned (%v); the child should have been killed in task c", err)
}

// killChildMidRun starts the child on spec, waits until it is inside task
// c (a, b and e have succeeded), and kills it with SIGKILL.
func killChildMidRun(t *testing.T, spec string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+spec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var seen []string
	for lines.Scan() && lines.Text() != childReady {
		seen = append(seen, lines.Text())
	}
	if lines.Text() != childReady {
		_ = cmd.Wait()
		t.Fatalf("the child ended without reaching task c:\n%s\n%s", strings.Join(seen, "\n"), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed", err)
	}
}

// testKillAndResume kills a child mid-run, then resumes the run in this
// process: no task that succeeded runs again, the lost attempt is run
// again without counting as a failure, and the outbox holds each task's
// message exactly once.
func testKillAndResume(t *testing.T, spec string) {
	killChildMidRun(t, spec)
	ws, outboxCount := openCrashStore(t, spec)
	var mu sync.Mutex
	calls := map[string]int{}
	d := crashDAG(t, func(ctx context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[id]++
		return nil
	})

	// The child's lease is live: another instance must not take the run.
	live, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "too-early", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Register(d); err != nil {
		t.Fatal(err)
	}
	if _, err := live.Resume(context.Background(), "crash-run"); !isLeased(err) {
		t.Fatalf("resuming under the child's live lease: %v, want wfstore.ErrLeased", err)
	}
	before, _ := live.Get(context.Background(), "crash-run")
	if c := before.Task("c"); c.State != models.TaskStateRunning || !strings.Contains(c.Reason, "on instance child") {
		t.Fatalf("before the resume, c is %s (%q)", c.State, c.Reason)
	}

	// An hour later (the fake clock), the lease has lapsed.
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "parent", Logger: quiet,
		Clock: clock.NewFake(time.Now().Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := e.Resume(context.Background(), "crash-run")
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Resume: %v\n%v", err, r)
	}
	mu.Lock()
	if calls["a"]+calls["b"]+calls["e"] != 0 || calls["c"] != 1 || calls["d"] != 1 {
		t.Errorf("tasks run in the parent: %v; want c and d once, nothing else", calls)
	}
	mu.Unlock()
	for _, id := range []string{"a", "b", "e", "c", "d"} {
		if n := outboxCount("crash." + id); n != 1 {
			t.Errorf("outbox holds %d messages of task %s, want 1", n, id)
		}
	}
	c := r.Task("c")
	if len(c.History) != 2 || c.History[0].Outcome != "lost" || c.History[0].Instance != "child" ||
		c.History[1].Outcome != "success" || c.History[1].Instance != "parent" {
		t.Errorf("c's history = %+v", c.History)
	}
	if len(r.Task("a").History) != 1 || r.Task("a").History[0].Instance != "child" {
		t.Errorf("a's history = %+v", r.Task("a").History)
	}
}

func TestKillAndResumeSQLite(t *testing.T) {
	t.Parallel()
	testKillAndResume(t, "sqlite:"+filepath.Join(t.TempDir(), "crash.db"))
}

func TestKillAndResumePostgres(t *testing.T) {
	t.Parallel()
	testKillAndResume(t, "postgres:"+testenv.NewSchema(t, "wf_crash_"))
}

func isLeased(err error) bool { return errors.Is(err, wfstore.ErrLeased) }

// quiet discards the engines' logs.
var quiet = slog.New(slog.DiscardHandler)
