package inspect

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// chartWorkloads are the chart's two workloads in gpushare-system with the given readiness.
func chartWorkloads(dsReady, dsDesired, depReady int32) []runtime.Object {
	labels := func(c string) map[string]string { return map[string]string{"app.kubernetes.io/component": c} }
	return []runtime.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-device-plugin", Namespace: "gpushare-system", Labels: labels("device-plugin")},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: dsDesired, NumberReady: dsReady, UpdatedNumberScheduled: dsDesired}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-scheduler", Namespace: "gpushare-system", Labels: labels("scheduler")},
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(1))}, Status: appsv1.DeploymentStatus{ReadyReplicas: depReady, UpdatedReplicas: 1}},
	}
}

func TestHealthSaysHealthyOrWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objs     []runtime.Object
		args     []string
		healthy  bool
		problems []string
	}{
		{"installed and consistent", append(scenarios["mixed-sizes"](t), chartWorkloads(3, 3, 1)...), nil, true, nil},
		{"a device plugin pod not ready", append(scenarios["mixed-sizes"](t), chartWorkloads(2, 3, 1)...), nil, false,
			[]string{"DaemonSet gpushare-system/gpushare-device-plugin: 2 of 3 pods ready", "kubectl -n gpushare-system describe daemonset gpushare-device-plugin"}},
		{"the scheduler not ready", append(scenarios["mixed-sizes"](t), chartWorkloads(3, 3, 0)...), nil, false,
			[]string{"Deployment gpushare-system/gpushare-scheduler: 0 of 1 pods ready"}},
		{"the chart in another namespace", append(scenarios["mixed-sizes"](t), chartWorkloads(3, 3, 1)...), []string{"--release-namespace", "gpu"}, false,
			[]string{"no gpushare device plugin DaemonSet in namespace gpu", "no gpushare scheduler Deployment in namespace gpu"}},
		{"no GPU node", append(scenarios["empty"](t), chartWorkloads(0, 0, 1)...), nil, false,
			[]string{"no node reports GPU cards: label the GPU nodes gpushare=true", "runs on no node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, tc.objs, append([]string{"health"}, tc.args...)...)
			if tc.healthy {
				if err != nil || !strings.HasPrefix(out, "healthy: ") {
					t.Fatalf("err %v, output:\n%s", err, out)
				}
				return
			}
			if !errors.Is(err, ErrUnhealthy) || !strings.HasPrefix(out, "unhealthy: ") {
				t.Fatalf("err %v, want ErrUnhealthy; output:\n%s", err, out)
			}
			for _, p := range tc.problems {
				if !strings.Contains(out, p) {
					t.Errorf("output lacks %q:\n%s", p, out)
				}
			}
		})
	}
}

func TestHealthCountsAViewWarningButNotATerminatingOverlap(t *testing.T) {
	ok := []Workload{{Kind: "DaemonSet", Name: "dp", Ready: 1, Updated: 1, Desired: 1}, {Kind: "Deployment", Name: "s", Ready: 1, Updated: 1, Desired: 1}}
	v := View{Nodes: []Node{{Name: "n"}}, Warnings: []Warning{{Node: "n", Code: WarnTerminatingOverlap, Message: "clears"}}}
	if h := CheckHealth(v, ok, "ns"); len(h.Problems) != 0 {
		t.Errorf("a terminating overlap is transient, got %v", h.Problems)
	}
	v.Warnings = append(v.Warnings, Warning{Node: "n", Code: WarnCapacityMismatch, Message: "inventory 80, capacity 40"})
	if h := CheckHealth(v, ok, "ns"); len(h.Problems) != 1 || !strings.Contains(h.Problems[0], "CapacityMismatch") {
		t.Errorf("problems %v, want the capacity mismatch", h.Problems)
	}
}
