//go:build unix

package allocator_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (user + system). On a
// shared machine it measures the work done, where wall time also counts
// the waits for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
