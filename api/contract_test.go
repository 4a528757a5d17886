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

// TestProductCodeReadsPodFactsThroughAPI fails when code outside this
// package reads a container's resource limits or requests (the pod's GPU
// demand: api.KubeletDemand, Names.RequestFromPod) or decodes an assignment
// record itself (Names.TrustedAssignment). Writing limits (a trace replay
// building pods) is not reading them.
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
				t.Errorf("%s: %s", fset.Position(v.pos), v.what)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

type violation struct {
	pos  token.Pos
	what string
}

// contractViolations are the reads of container limits/requests (not on the
// left of an assignment) and the calls that decode a record, in f.
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
				out = append(out, violation{n.Pos(), "reads a container's " + strings.ToLower(sel.Sel.Name) + " directly: use api.KubeletDemand or api.Names.RequestFromPod"})
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "AssignmentFromPod" || sel.Sel.Name == "DecodeAssignment") {
				out = append(out, violation{n.Pos(), "decodes an assignment record directly: use api.Names.TrustedAssignment"})
			}
		}
		return true
	})
	return out
}

// The guard itself: it sees a read and a decode, and lets a write pass.
func TestContractViolationsSeesReadsAndDecodes(t *testing.T) {
	src := `package x
func f(c corev1.Container, n api.Names, pod *corev1.Pod) {
	q := c.Resources.Limits["example.com/gpu-mem"]
	c.Resources.Limits["example.com/gpu"] = q
	_, _ = n.AssignmentFromPod(pod)
	_, _ = api.DecodeAssignment("")
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(contractViolations(f)); got != 3 {
		t.Errorf("violations = %d, want 3 (a read, two decodes; the write passes)", got)
	}
}
