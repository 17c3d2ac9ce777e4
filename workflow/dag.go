package workflow

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// TaskFunc is the work of a task. It returns nil on success. A failed
// attempt is retried (see Task.Retries) unless its error is permanent
// (errorhandling.Permanent, or the engine's classifier says so). ctx is
// cancelled when the attempt times out, the run stops under the fail
// policy, or the engine shuts down; the function should return soon after.
type TaskFunc func(ctx context.Context, tc *TaskContext) error

// Task is one step of a DAG.
type Task struct {
	// ID identifies the task within its DAG. Required.
	ID string
	// Upstream lists the tasks that must end before this one runs. By
	// default each must succeed; see AllowFailure.
	Upstream []string
	// AllowFailure lists dependencies, from Upstream, whose failure this
	// task tolerates: once they have ended, whatever their outcome, it
	// runs. A failure still counts for the run's outcome. Under the fail
	// policy any failure stops the run, so the list changes nothing there.
	AllowFailure []string
	// Run is the task's work. Required.
	Run TaskFunc
	// Retries is how many times a failed attempt is tried again; 0 means
	// one attempt. A task out of attempts is failed and dead-lettered.
	Retries int
	// Strategy gives the wait before retry n (n = failures so far). Nil
	// means retry.DefaultExponentialBackoff (1 s doubling, ±25 %). A Stop
	// ends the retries early. A Delay that panics is logged at ERROR and
	// the default's delay is used for that retry.
	Strategy retry.Strategy
	// Timeout bounds one attempt; 0 means no bound. An attempt past it is
	// cancelled and fails with a *TimeoutError, which is retried. The run
	// waits for the function to return (the task never runs twice at
	// once); one that has not 5 s after the cancellation is logged at
	// WARN.
	Timeout time.Duration
	// Critical says the run cannot succeed, even partially, unless this
	// task succeeds (as does listing it in PropagationConfig.CriticalTasks).
	Critical bool
}

// DAG is a validated workflow definition: tasks, their dependencies, and
// how a failure propagates. Build one with NewDAG; it is immutable and
// safe for concurrent use.
type DAG struct {
	id       string
	prop     *errorhandling.PropagationConfig
	tasks    []Task         // in definition order
	index    map[string]int // task ID -> position in tasks
	ups      [][]string     // each task's upstream IDs without repeats, as tasks
	order    []string       // topological, ties in definition order
	down     map[string][]string
	allow    map[[2]string]bool // {task, upstream} edges allowed to fail
	critical map[string]bool
	graph    graph // the dependencies by position in order, for evaluate
	hash     string
	model    *models.DAG
}

// NewDAG validates and returns a DAG. prop says how a failure propagates
// (nil means the default: skip_downstream, no partial success). It rejects,
// with a *DefinitionError naming the culprits, an empty ID, duplicate task
// IDs, dependencies on unknown tasks, cycles (named as a path, "a -> b ->
// a", read "a depends on b, which depends on a"), AllowFailure entries not in Upstream, critical tasks that do not
// exist, a task without Run, negative Retries or Timeout, and an invalid
// prop. IDs must be valid UTF-8 without NUL: PostgreSQL's text stores
// nothing else, and a DAG must run the same on either store.
func NewDAG(id string, prop *errorhandling.PropagationConfig, tasks ...Task) (*DAG, error) {
	if id == "" {
		return nil, defErr(id, nil, "empty DAG ID")
	}
	if err := wfstore.CheckID(id); err != nil {
		return nil, defErr(id, nil, "DAG ID: %v", err)
	}
	if err := prop.Validate(); err != nil {
		return nil, &DefinitionError{DAGID: id, Detail: err.Error()}
	}
	if prop == nil {
		prop = errorhandling.DefaultPropagationConfig()
	}
	// The DAG keeps a copy, as it keeps copies of its tasks: a variable
	// reused for the next definition must not change this one's policy.
	prop = copyPropagation(prop)
	d := &DAG{id: id, prop: prop, tasks: slices.Clone(tasks), index: map[string]int{},
		down: map[string][]string{}, allow: map[[2]string]bool{}, critical: map[string]bool{}}
	var dups []string
	for i, t := range d.tasks {
		switch {
		case t.ID == "":
			return nil, defErr(id, nil, "task %d has an empty ID", i)
		case wfstore.CheckID(t.ID) != nil:
			return nil, defErr(id, nil, "task %q: ID %v", t.ID, wfstore.CheckID(t.ID))
		case t.Run == nil:
			return nil, defErr(id, nil, "task %s has no Run function", t.ID)
		case t.Retries < 0:
			return nil, defErr(id, nil, "task %s: Retries must not be negative, got %d", t.ID, t.Retries)
		case t.Timeout < 0:
			return nil, defErr(id, nil, "task %s: Timeout must not be negative, got %s", t.ID, t.Timeout)
		}
		if _, dup := d.index[t.ID]; dup {
			dups = append(dups, t.ID)
			continue
		}
		d.index[t.ID] = i
		d.tasks[i].Upstream = slices.Clone(t.Upstream)
		d.tasks[i].AllowFailure = slices.Clone(t.AllowFailure)
	}
	if len(dups) > 0 {
		return nil, defErr(id, ErrDuplicateTask, "%s", list(dups))
	}
	if err := d.link(); err != nil {
		return nil, err
	}
	if err := d.sort(); err != nil {
		return nil, err
	}
	d.graph = d.positions()
	d.hash = d.fingerprint()
	d.model = d.buildModel()
	return d, nil
}

// link checks the edges and indexes them.
func (d *DAG) link() error {
	var unknown []string
	d.ups = make([][]string, len(d.tasks))
	for i, t := range d.tasks {
		seen := make(map[string]bool, len(t.Upstream))
		for _, up := range t.Upstream {
			_, known := d.index[up]
			if !known {
				unknown = append(unknown, t.ID+" -> "+up)
			}
			if seen[up] {
				continue
			}
			seen[up] = true
			d.ups[i] = append(d.ups[i], up)
			if known {
				d.down[up] = append(d.down[up], t.ID)
			}
		}
		for _, up := range t.AllowFailure {
			if !slices.Contains(t.Upstream, up) {
				return defErr(d.id, nil, "task %s: AllowFailure lists %s, which is not in its Upstream", t.ID, up)
			}
			d.allow[[2]string{t.ID, up}] = true
		}
		if t.Critical {
			d.critical[t.ID] = true
		}
	}
	if len(unknown) > 0 {
		return defErr(d.id, ErrUnknownDependency, "%s", strings.Join(unknown, ", "))
	}
	for _, c := range d.prop.CriticalTasks {
		if _, ok := d.index[c]; !ok {
			return defErr(d.id, ErrUnknownDependency, "critical task %s is not a task of the DAG", c)
		}
		d.critical[c] = true
	}
	return nil
}

// sort orders the tasks topologically (Kahn), ties in definition order, or
// reports a cycle as a path. The order is that of passes over the tasks in
// definition order, each taking every task whose dependencies are taken,
// until none is left. Done as written, with a pass for each task of a
// chain defined from its end, 10,000 tasks took seconds: instead each pass
// takes the ready tasks from a heap of positions, and a task made ready
// behind the pass's position waits for the next pass.
func (d *DAG) sort() error {
	indeg := make([]int, len(d.tasks))
	var pass intHeap
	for i, t := range d.tasks {
		if indeg[i] = len(d.upstream(t.ID)); indeg[i] == 0 {
			pass = append(pass, i)
		}
	}
	var next []int
	for len(pass) > 0 {
		for len(pass) > 0 {
			i := heap.Pop(&pass).(int)
			d.order = append(d.order, d.tasks[i].ID)
			for _, dn := range d.down[d.tasks[i].ID] {
				j := d.index[dn]
				if indeg[j]--; indeg[j] > 0 {
					continue
				}
				if j > i {
					heap.Push(&pass, j)
				} else {
					next = append(next, j)
				}
			}
		}
		pass, next = intHeap(next), nil
		heap.Init(&pass)
	}
	if len(d.order) < len(d.tasks) {
		done := make(map[string]bool, len(d.order))
		for _, id := range d.order {
			done[id] = true
		}
		return defErr(d.id, ErrCycle, "%s", d.findCycle(done))
	}
	return nil
}

// graph is a DAG's dependencies by position in its order: evaluate runs
// after every change to a run, and with maps keyed by task ID it cost a
// run of n tasks n² map operations (a 4,000-task fan-out spent most of
// its 6.5 s there).
type graph struct {
	pos     map[string]int // task ID -> position in order
	ups     [][]int        // each task's upstream positions, as upstream lists them
	allowed [][]bool       // whether the task allows the upstream of ups at the same index to fail
}

// positions indexes the DAG's dependencies by position in its order.
func (d *DAG) positions() graph {
	g := graph{pos: make(map[string]int, len(d.order)), ups: make([][]int, len(d.order)),
		allowed: make([][]bool, len(d.order))}
	for i, id := range d.order {
		g.pos[id] = i
	}
	for i, id := range d.order {
		for _, up := range d.upstream(id) {
			g.ups[i] = append(g.ups[i], g.pos[up])
			g.allowed[i] = append(g.allowed[i], d.allow[[2]string{id, up}])
		}
	}
	return g
}

// intHeap is a min-heap of task positions (container/heap).
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// findCycle returns one cycle among the tasks not in done, as "a -> b ->
// a": a depends on b, which depends on a.
func (d *DAG) findCycle(done map[string]bool) string {
	var start string
	for _, t := range d.tasks {
		if !done[t.ID] {
			start = t.ID
			break
		}
	}
	// Walk upstream edges that stay among the undone tasks until a task
	// repeats; every undone task has such an edge.
	seen := map[string]int{}
	var path []string
	for cur := start; ; {
		if i, ok := seen[cur]; ok {
			cycle := append(slices.Clone(path[i:]), cur)
			return strings.Join(cycle, " -> ")
		}
		seen[cur] = len(path)
		path = append(path, cur)
		for _, up := range d.upstream(cur) {
			if !done[up] {
				cur = up
				break
			}
		}
	}
}

// upstream returns the task's dependencies without repeats, computed
// once by link (a join after 1,000 tasks took a quadratic pass on every
// evaluation of its run). Callers must not change the slice.
func (d *DAG) upstream(id string) []string { return d.ups[d.index[id]] }

// edges returns each task's upstream IDs, empty for a root: what a run
// keeps of its DAG (wfstore.Run.Upstream).
func (d *DAG) edges() map[string][]string {
	m := make(map[string][]string, len(d.order))
	for _, id := range d.order {
		m[id] = append([]string{}, d.upstream(id)...)
	}
	return m
}

// fingerprint hashes what a stored run depends on: task IDs, edges (and
// which may fail), critical tasks and the policy. Retries, timeouts and
// functions may change between a crash and a resume; these may not.
func (d *DAG) fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "policy=%s partial=%v\n", d.prop.EffectivePolicy(), d.prop.AllowPartialSuccess)
	ids := slices.Sorted(func(yield func(string) bool) {
		for _, t := range d.tasks {
			if !yield(t.ID) {
				return
			}
		}
	})
	for _, id := range ids {
		ups := slices.Sorted(slices.Values(d.upstream(id)))
		var allowed []string
		for _, up := range ups {
			if d.allow[[2]string{id, up}] {
				allowed = append(allowed, up)
			}
		}
		fmt.Fprintf(h, "%q critical=%v up=%q allow=%q\n", id, d.critical[id], ups, allowed)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (d *DAG) buildModel() *models.DAG {
	m := &models.DAG{ID: d.id, Name: d.id}
	for _, id := range d.order {
		t := d.tasks[d.index[id]]
		m.Tasks = append(m.Tasks, models.Task{ID: t.ID, DAGID: d.id, Retries: t.Retries, Timeout: t.Timeout,
			Critical: d.critical[t.ID], Upstream: slices.Clone(d.upstream(t.ID))})
	}
	return m
}

// ID returns the DAG's ID.
func (d *DAG) ID() string { return d.id }

// TaskIDs returns the task IDs in dependency order: every task after its
// upstream tasks, ties in definition order.
func (d *DAG) TaskIDs() []string { return slices.Clone(d.order) }

// Propagation returns the DAG's propagation configuration (the default
// when NewDAG was given nil), as it was when NewDAG was called. Each call
// returns a new copy.
func (d *DAG) Propagation() *errorhandling.PropagationConfig { return copyPropagation(d.prop) }

// copyPropagation returns a copy of p that shares nothing changeable with
// it.
func copyPropagation(p *errorhandling.PropagationConfig) *errorhandling.PropagationConfig {
	c := *p
	c.CriticalTasks = slices.Clone(p.CriticalTasks)
	return &c
}

// Model returns the DAG as plain data (models.DAG), tasks in dependency
// order, Critical set for tasks critical either way. Each call returns a
// new copy.
func (d *DAG) Model() *models.DAG {
	m := *d.model
	m.Tasks = slices.Clone(d.model.Tasks)
	for i := range m.Tasks {
		m.Tasks[i].Upstream = slices.Clone(m.Tasks[i].Upstream)
	}
	return &m
}

// task returns the definition of the task with the ID.
func (d *DAG) task(id string) *Task { return &d.tasks[d.index[id]] }

// policy is the effective propagation policy.
func (d *DAG) policy() errorhandling.PropagationPolicy { return d.prop.EffectivePolicy() }
