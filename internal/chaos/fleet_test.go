package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// relayBin is the relayproc program, built once by TestMain.
var relayBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "backstop-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		relayBin = filepath.Join(dir, "relayproc")
		// go test puts its own go command first on the PATH.
		cmd := exec.Command("go", "build", "-o", relayBin, "./relayproc")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: build relayproc:", err)
			return 1
		}
		return m.Run()
	}())
}

// proc is one run of a relay process.
type proc struct {
	id       string
	cmd      *exec.Cmd
	log      string
	done     chan struct{} // closed when it has exited
	err      error         // its exit status, once done
	expected bool          // the test signalled it to end (kill or stop)
}

// fleet runs relay processes in slots, restarting a slot's process when
// the test kills it and, as a supervisor would, when it exits on its own
// (recorded in unexpected).
type fleet struct {
	t    testing.TB
	dir  string
	args func(instance string) []string
	// clockFile is the relays' -clock-file, when they have one.
	clockFile string

	mu         sync.Mutex
	slots      map[string]*proc
	gens       map[string]int
	stopping   bool
	unexpected []string
	starts     int
	clockAhead time.Duration // what stepClock wrote last
}

func newFleet(t testing.TB, args func(instance string) []string) *fleet {
	f := &fleet{t: t, dir: t.TempDir(), args: args, slots: map[string]*proc{}, gens: map[string]int{}}
	t.Cleanup(f.killAll)
	return f
}

// start runs a new process in slot and returns its instance id.
func (f *fleet) start(slot string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startLocked(slot)
}

func (f *fleet) startLocked(slot string) string {
	f.gens[slot]++
	f.starts++
	id := fmt.Sprintf("relay-%s-%d", slot, f.gens[slot])
	p := &proc{id: id, log: filepath.Join(f.dir, id+".log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		f.t.Fatalf("fleet: %v", err)
	}
	p.cmd = exec.Command(relayBin, f.args(id)...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		out.Close()
		f.t.Fatalf("fleet: start %s: %v", id, err)
	}
	f.slots[slot] = p
	go func() {
		p.err = p.cmd.Wait()
		out.Close()
		close(p.done)
		f.mu.Lock()
		defer f.mu.Unlock()
		if p.expected || f.stopping {
			return
		}
		f.unexpected = append(f.unexpected, fmt.Sprintf("%s exited by itself (%v): %s", id, p.err, tail(p.log)))
		if f.slots[slot] == p {
			f.startLocked(slot)
		}
	}()
	return id
}

// instance returns the id of the process in slot.
func (f *fleet) instance(slot string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots[slot].id
}

// kill sends SIGKILL to the process in slot, waits for it to die and
// starts a new one, whose id it returns.
func (f *fleet) kill(slot string) string {
	f.mu.Lock()
	p := f.slots[slot]
	p.expected = true
	f.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	f.waitExit(p, 10*time.Second)
	return f.start(slot)
}

// stepClock moves the store clock of every relay d further ahead of the
// host's (relayproc's -clock-file, read again on SIGUSR1), with no time
// passing: the database's clock stepped forward. A relay started later
// reads the same offset.
func (f *fleet) stepClock(d time.Duration) {
	f.mu.Lock()
	f.clockAhead += d
	ahead := f.clockAhead
	slots := make([]string, 0, len(f.slots))
	for s := range f.slots {
		slots = append(slots, s)
	}
	f.mu.Unlock()
	if f.clockFile == "" {
		f.t.Fatal("fleet: its relays have no clock file")
	}
	if err := os.WriteFile(f.clockFile, []byte(ahead.String()), 0o644); err != nil {
		f.t.Fatal(err)
	}
	for _, s := range slots {
		f.signal(s, syscall.SIGUSR1)
	}
}

// signal sends sig to the process in slot.
func (f *fleet) signal(slot string, sig syscall.Signal) {
	f.mu.Lock()
	p := f.slots[slot]
	f.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		f.t.Errorf("fleet: %v to %s: %v", sig, p.id, err)
	}
}

func (f *fleet) waitExit(p *proc, timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stopAll sends SIGTERM to every process and waits for them to exit; it
// returns the ids of those that did not exit cleanly.
func (f *fleet) stopAll(timeout time.Duration) []string {
	f.mu.Lock()
	f.stopping = true
	ps := make([]*proc, 0, len(f.slots))
	for _, p := range f.slots {
		ps = append(ps, p)
	}
	f.mu.Unlock()
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var bad []string
	for _, p := range ps {
		if !f.waitExit(p, timeout) {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			bad = append(bad, p.id+" did not stop within "+timeout.String())
		} else if p.err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v: %s", p.id, p.err, tail(p.log)))
		}
	}
	return bad
}

func (f *fleet) killAll() {
	f.mu.Lock()
	f.stopping = true
	ps := make([]*proc, 0, len(f.slots))
	for _, p := range f.slots {
		ps = append(ps, p)
	}
	f.mu.Unlock()
	for _, p := range ps {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// unexpectedExits returns the exits the test did not cause.
func (f *fleet) unexpectedExits() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.unexpected...)
}

// logLines counts the lines of every process's log holding s.
func (f *fleet) logLines(s string) int {
	files, _ := filepath.Glob(filepath.Join(f.dir, "*.log"))
	n := 0
	for _, file := range files {
		b, _ := os.ReadFile(file)
		n += bytes.Count(b, []byte(s))
	}
	return n
}

// tail returns the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(bytes.TrimSpace(b))
}
