package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/replay"
)

func TestConfigSetsTheRarerOptionsAndRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var o replay.Options
	if err := readConfig(&o, ""); err != nil || o.FirstSeed != 42 || o.Scale != 1 || o.Inflate != replay.DefaultInflate || o.WorkloadTolerance != nil || o.PerRun {
		t.Errorf("no -config: %+v, %v; want the defaults", o, err)
	}
	if err := readConfig(&o, write("rare.yaml", "firstSeed: 7\nscale: 4\nworkloadTolerance: 0\nparallel: 2\nperRun: true\ninflate: 1.5\n")); err != nil {
		t.Fatal(err)
	}
	if o.FirstSeed != 7 || o.Scale != 4 || o.WorkloadTolerance == nil || *o.WorkloadTolerance != 0 || o.Parallel != 2 || !o.PerRun || o.Inflate != 1.5 {
		t.Errorf("-config rare.yaml: %+v", o)
	}
	err := readConfig(&o, write("typo.yaml", "workload-tolerance: 0\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "workload-tolerance"`) || !strings.Contains(err.Error(), "workloadTolerance") {
		t.Errorf("an unknown key: %v, want an error naming it and the keys", err)
	}
}
