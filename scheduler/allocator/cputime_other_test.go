//go:build !unix

package allocator_test

import "time"

// processCPU is unknown here; benchmarks then report 0 CPU ns/op.
func processCPU() time.Duration { return 0 }
