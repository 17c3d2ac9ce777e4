package workflow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow"
)

// passOrder is the order NewDAG documents, computed as it reads: passes
// over the tasks in definition order, each taking every task whose
// dependencies are taken, until none is left.
func passOrder(tasks []workflow.Task) []string {
	done := map[string]bool{}
	var order []string
	for len(order) < len(tasks) {
		for _, t := range tasks {
			if done[t.ID] {
				continue
			}
			ready := true
			for _, up := range t.Upstream {
				ready = ready && done[up]
			}
			if ready {
				done[t.ID] = true
				order = append(order, t.ID)
			}
		}
	}
	return order
}

// TestDAGOrderOfRandomDefinitions: the dependency order, ties in
// definition order, is the one passes over the definitions give, on
// random DAGs defined in random orders.
func TestDAGOrderOfRandomDefinitions(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		n := 1 + rng.IntN(30)
		tasks := make([]workflow.Task, n)
		for i := range tasks {
			tasks[i] = tk(fmt.Sprint(i))
			for j := range i {
				if rng.IntN(4) == 0 {
					tasks[i].Upstream = append(tasks[i].Upstream, fmt.Sprint(j))
				}
			}
		}
		rng.Shuffle(n, func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
		d, err := workflow.NewDAG("random", nil, tasks...)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.TaskIDs(), passOrder(tasks); !slices.Equal(got, want) {
			t.Fatalf("TaskIDs = %v\nwant %v\n(definitions %v)", got, want, tasks)
		}
	}
}

// TestNewDAGOfALongChainDefinedFromItsEnd: NewDAG took a pass over every
// task for each task of a chain defined from its last task to its first,
// seconds for 10,000 tasks and minutes for 100,000. The deadline only
// catches that: 100,000 tasks now take a fraction of a second, and the
// quadratic sort took about 5 minutes.
func TestNewDAGOfALongChainDefinedFromItsEnd(t *testing.T) {
	t.Parallel()
	const n = 100_000
	tasks := make([]workflow.Task, 0, n)
	for i := n - 1; i >= 0; i-- {
		tasks = append(tasks, tk(fmt.Sprint(i)))
		if i > 0 {
			tasks[len(tasks)-1].Upstream = []string{fmt.Sprint(i - 1)}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	built := make(chan error, 1)
	var d *workflow.DAG
	go func() {
		var err error
		d, err = workflow.NewDAG("chain", nil, tasks...)
		built <- err
	}()
	select {
	case err := <-built:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("NewDAG of a 100,000-task chain did not return within a minute")
	}
	ids := d.TaskIDs()
	if len(ids) != n || ids[0] != "0" || ids[n-1] != fmt.Sprint(n-1) {
		t.Errorf("TaskIDs: %d tasks from %s to %s", len(ids), ids[0], ids[len(ids)-1])
	}
}
