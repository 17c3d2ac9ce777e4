package harness

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// The machine is shared: before each case the parent waits, up to
// Options.QuietWait, for the other processes' CPU use to fall below
// QuietBusy of all cores, sampled over quietSample. A case still starts
// when the wait runs out; the report shows the load each case began under.
const (
	QuietBusy   = 0.25
	quietSample = 500 * time.Millisecond
)

// waitQuiet waits up to limit for the machine to be quiet and returns the
// share of CPU time that was busy in the last sample (0 to 1; -1 when
// unknown).
func waitQuiet(limit time.Duration) float64 {
	if limit <= 0 {
		return cpuBusy(quietSample / 10) // a glance, for the report
	}
	deadline := time.Now().Add(limit)
	for {
		busy := cpuBusy(quietSample)
		if busy < QuietBusy || time.Now().After(deadline) {
			return busy
		}
	}
}

// cpuBusy samples /proc/stat over d and returns the share of CPU time
// spent busy (not idle or waiting for I/O), or -1 when it cannot tell.
func cpuBusy(d time.Duration) float64 {
	b1, t1 := cpuTimes()
	time.Sleep(d)
	b2, t2 := cpuTimes()
	if t2 <= t1 {
		return -1
	}
	return float64(b2-b1) / float64(t2-t1)
}

// cpuTimes returns the busy and total jiffies of all CPUs.
func cpuTimes() (busy, total uint64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text()) // cpu user nice system idle iowait irq softirq steal ...
	for i, s := range fields[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			continue
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}
