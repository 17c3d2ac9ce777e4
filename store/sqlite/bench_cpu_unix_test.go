//go:build unix

package sqlite

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user and system): on a
// busy machine it varies less with the load than the time taken.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
