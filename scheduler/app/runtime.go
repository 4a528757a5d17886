package app

import (
	"runtime/debug"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/internal/memlimit"
)

// setMemoryLimit sets the Go runtime's soft memory limit to fraction of the
// cgroup's (GoMemoryLimitFraction) unless GOMEMLIMIT set one, says so, and
// returns the limit it set (0: none).
func setMemoryLimit(fraction float64, lookupEnv func(string) (string, bool), read memlimit.ReadFile) int64 {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok {
		klog.InfoS("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, err := memlimit.CgroupLimit(read)
	if err != nil {
		klog.ErrorS(err, "Reading the cgroup memory limit; no Go memory limit set (set GOMEMLIMIT to give one)")
		return 0
	}
	soft := memlimit.SoftLimit(limit, fraction)
	if soft > 0 {
		debug.SetMemoryLimit(soft)
		klog.InfoS("Go memory limit set", "bytes", soft, "cgroupLimit", limit, "fraction", fraction)
	}
	return soft
}

// setGCPercent sets the garbage collector's target to percent (GCPercent)
// unless GOGC set one or percent is 0, says so, and returns the target set
// (0: none).
func setGCPercent(percent int, lookupEnv func(string) (string, bool)) int {
	if v, ok := lookupEnv("GOGC"); ok {
		klog.InfoS("Go GC target from GOGC", "GOGC", v)
		return 0
	}
	if percent <= 0 {
		return 0
	}
	debug.SetGCPercent(percent)
	klog.InfoS("Go GC target set", "percent", percent)
	return percent
}
