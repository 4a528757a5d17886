package response

import (
	"strings"
	"testing"
)

func TestMPSValidate(t *testing.T) {
	if err := (MPS{}).Validate(); err != nil {
		t.Errorf("off: %v", err)
	}
	if err := (MPS{Enabled: true, PipeDir: "/run/nvidia/mps"}).Validate(); err == nil || !strings.Contains(err.Error(), "memory.mpsShmDir") {
		t.Errorf("no shm dir: err = %v", err)
	}
	if err := (MPS{Enabled: true, PipeDir: "relative", ShmDir: "/x"}).Validate(); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative pipe dir: err = %v", err)
	}
	if got := MPSLimit(10 * 1024); got != "0=10240M" {
		t.Errorf("MPSLimit(10 GiB) = %q", got)
	}
}
