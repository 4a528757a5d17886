package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// productDirs are the programs that import this package, and their shared
// internal packages. Their non-test code reads a pod's demand and its record
// only through this package: KubeletDemand and Names.RequestFromPod for the
// demand, Names.TrustedAssignment for the record.
var productDirs = []string{"../deviceplugin", "../scheduler", "../inspector", "../internal"}

// testHelperDir reports whether dir holds test builders (not product code):
// podtest, podrestest, the scheduler's fixture.
func testHelperDir(dir string) bool {
	base := filepath.Base(dir)
	return strings.HasSuffix(base, "test") || base == "fixture"
}

// allowed are the contract reads outside this package that are
// legitimate, by file and by what is read, each with its reason.
var allowed = map[[2]string]string{
	{"../deviceplugin/usage/sample.go", "phase"}: "a running pod's whole cards are its own whatever its record shows: whether it runs, not whether it finished",
}

// TestProductCodeReadsPodFactsThroughAPI fails when code outside this
// package reads a container's resource limits or requests (the pod's GPU
// demand: api.KubeletDemand, Names.RequestFromPod), decodes an assignment
// record itself (Names.TrustedAssignment), checks a pod's phase (HoldsUnits,
// MayStartContainers, Admitted) or reads a claim's consumed capacity
// (DRAConsumedMemory), unless allowed lists it. Writing limits (a trace
// replay building pods) is not reading them.
func TestProductCodeReadsPodFactsThroughAPI(t *testing.T) {
	fset := token.NewFileSet()
	for _, root := range productDirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && testHelperDir(path) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, v := range contractViolations(f) {
				if _, ok := allowed[[2]string{path, v.kind}]; !ok {
					t.Errorf("%s: %s", fset.Position(v.pos), v.what)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

type violation struct {
	pos        token.Pos
	kind, what string
}

// finishedPhases are the phases a check of which is the pod-lifecycle rule.
var finishedPhases = map[string]bool{"PodSucceeded": true, "PodFailed": true, "PodRunning": true}

// contractViolations are the reads of container limits/requests and of
// consumed capacity (not on the left of an assignment), the calls that
// decode a record and the comparisons of a pod's phase, in f.
func contractViolations(f *ast.File) []violation {
	written := map[ast.Expr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok {
			for _, l := range as.Lhs {
				written[l] = true
			}
		}
		return true
	})
	var out []violation
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IndexExpr:
			if sel, ok := n.X.(*ast.SelectorExpr); ok && !written[n] && (sel.Sel.Name == "Limits" || sel.Sel.Name == "Requests") {
				out = append(out, violation{n.Pos(), "demand", "reads a container's " + strings.ToLower(sel.Sel.Name) + " directly: use api.KubeletDemand or api.Names.RequestFromPod"})
			}
		case *ast.SelectorExpr:
			if n.Sel.Name == "ConsumedCapacity" && !written[n] {
				out = append(out, violation{n.Pos(), "consumed", "reads an allocation result's consumed capacity directly: use api.DRAConsumedMemory"})
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isPhase(n.X) && finishedPhases[lastName(n.Y)] || isPhase(n.Y) && finishedPhases[lastName(n.X)]) {
				out = append(out, violation{n.Pos(), "phase", "checks a pod's phase directly: use api.HoldsUnits, api.MayStartContainers or api.Admitted"})
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "AssignmentFromPod" || sel.Sel.Name == "DecodeAssignment") {
				out = append(out, violation{n.Pos(), "record", "decodes an assignment record directly: use api.Names.TrustedAssignment"})
			}
		}
		return true
	})
	return out
}

// isPhase reports whether e is a pod's phase (….Status.Phase).
func isPhase(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Phase" && lastName(sel.X) == "Status"
}

// lastName is the name e ends with (corev1.PodFailed: PodFailed).
func lastName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// The guard itself: it sees each kind of read, and lets writes and other
// phases pass.
func TestContractViolationsSeesReadsAndDecodes(t *testing.T) {
	src := `package x
func f(c corev1.Container, n api.Names, pod *corev1.Pod, r resourceapi.DeviceRequestAllocationResult) {
	q := c.Resources.Limits["example.com/gpu-mem"]
	c.Resources.Limits["example.com/gpu"] = q
	_, _ = n.AssignmentFromPod(pod)
	_, _ = api.DecodeAssignment("")
	_ = pod.Status.Phase == corev1.PodSucceeded || corev1.PodFailed != pod.Status.Phase
	_ = pod.Status.Phase == corev1.PodPending
	pod.Status.Phase = corev1.PodRunning
	_ = r.ConsumedCapacity["memory"]
	r.ConsumedCapacity = nil
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, v := range contractViolations(f) {
		kinds = append(kinds, v.kind)
	}
	if want := "demand record record phase phase consumed"; strings.Join(kinds, " ") != want {
		t.Errorf("violations = %v, want %s (the writes and Pending pass)", kinds, want)
	}
}
