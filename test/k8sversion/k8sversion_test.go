package k8sversion

import (
	"os"
	"strings"
	"testing"
)

// The default is hack/k8s-version (what the scripts build) and the test
// module's k8s.io/kubernetes (the device manager the simulated nodes run).
func TestDefaultIsTheScriptsAndTheModules(t *testing.T) {
	b, err := os.ReadFile("../../hack/k8s-version")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != Default {
		t.Errorf("hack/k8s-version = %s, Default = %s", got, Default)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "\tk8s.io/kubernetes "+Default+"\n") {
		t.Errorf("test/go.mod does not require k8s.io/kubernetes %s", Default)
	}
}
