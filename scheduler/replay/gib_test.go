package replay

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The shipped heterogeneous GiB workload is what hack/openb-to-gib.sh makes
// of the shipped openb files (so editing either without the other fails),
// and it loads as a memory-format trace of openb's nodes and pods.
func TestShippedGiBTraceIsTheScriptsOutput(t *testing.T) {
	root := filepath.Join("..", "..")
	traces := filepath.Join(root, "scheduler", "simulate", "traces")
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "openb-to-gib.sh"), filepath.Join(traces, "openb"), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/openb-to-gib.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"openb_gib_nodes.csv", "openb_gib_pods.csv"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(traces, "gib", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("traces/gib/%s is not what hack/openb-to-gib.sh makes of traces/openb: run it again", name)
		}
	}
	tr, err := LoadMemory(filepath.Join(traces, "gib", "openb_gib_nodes.csv"), filepath.Join(traces, "gib", "openb_gib_pods.csv"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int64]bool{}
	for _, n := range tr.Nodes {
		for _, c := range n.Cards {
			sizes[c.Capacity] = true
		}
	}
	if len(tr.Nodes) != 1213 || len(tr.Pods) != 8152 || len(sizes) != 5 {
		t.Errorf("%d nodes, %d pods, %d card sizes; want openb's 1213 and 8152, and 5 sizes (16, 24, 32, 48, 80 GiB)", len(tr.Nodes), len(tr.Pods), len(sizes))
	}
}
