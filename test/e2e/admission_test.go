package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
	"github.com/gpushare/gpushare/test/k8sversion"
)

// A user creating a GPU pod that could never run is refused at creation, by
// the chart's ValidatingAdmissionPolicies on the real API server, with a
// message saying what to ask for instead; the size bound follows the largest
// card in the cluster, which the extender publishes (--card-limits-configmap)
// as nodes come and go. Pods that can run are admitted.
func TestAdmissionRefusesGPUPodsThatCouldNeverRun(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	system := testNamespace(ctx, t, c, "gpushare-system")
	users := testNamespace(ctx, t, c, "adm")
	applyAdmissionPolicies(ctx, t, c, system)
	enforceAdmission(ctx, t, c, system, users)

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	publisher, err := c.StartExtender(ctx, extenderBin, port, "--card-limits-configmap", system+"/"+api.CardLimitsConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Stop() })

	gpuNode(ctx, t, c, "adm-a", "2x24GiB:NVIDIA-L4")
	waitCardLimit(ctx, t, c, system, "24")

	pod := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := gpuPod(users, name, 1)
		mutate(p)
		return p
	}
	gpu := func(q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[api.DefaultNames().ResourceName()] = resource.MustParse(q)
		}
	}
	whole := func(q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			delete(p.Spec.Containers[0].Resources.Limits, api.DefaultNames().ResourceName())
			p.Spec.Containers[0].Resources.Limits[api.DefaultNames().WholeResourceName()] = resource.MustParse(q)
		}
	}
	denied := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"more units than any card", pod("huge", gpu("100000")), []string{
			"container c0 asks for 100k (= 100000 units), but the largest card in this cluster has 24 units (NVIDIA L4)", "Ask for at most 24"}},
		{"a binary suffix read as units", pod("mebibytes", gpu("500Mi")), []string{
			"container c0 asks for 500Mi (= 524288000 units)", "suffixes such as Mi multiply it"}},
		{"zero", pod("zero", gpu("0")), []string{
			"container c0 asks for example.com/gpu-mem: 0", "leave example.com/gpu-mem out to ask for no GPU"}},
		{"an init container asking", pod("init", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{api.DefaultNames().ResourceName(): resource.MustParse("2")}}}}
		}), []string{"init container setup asks for example.com/gpu-mem", "Ask for it in the app containers only"}},
		{"zero whole cards", pod("whole-zero", whole("0")), []string{
			"container c0 asks for example.com/gpu: 0", "leave example.com/gpu out to ask for none"}},
		{"whole cards and memory in one container", pod("whole-both", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[api.DefaultNames().WholeResourceName()] = resource.MustParse("1")
		}), []string{"container c0 asks for both example.com/gpu (whole cards) and example.com/gpu-mem", "Put them in separate containers"}},
		{"whole cards bypassing the scheduler", pod("whole-bypass", func(p *corev1.Pod) {
			whole("1")(p)
			p.Spec.NodeName = "adm-a"
		}), []string{"this pod asks for example.com/gpu and sets spec.nodeName (adm-a), which bypasses the gpushare scheduler"}},
	}
	// Policies take effect a moment after they are created: each denial is
	// waited for.
	for _, tc := range denied {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			var msg string
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := c.Client.CoreV1().Pods(users).Create(ctx, tc.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil {
					return false, nil
				}
				msg = err.Error()
				return true, nil
			})
			if err != nil || msg == "" {
				t.Fatalf("pod %s was admitted (%v); want it refused", tc.pod.Name, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("denial %q\nwant it to contain %q", msg, w)
				}
			}
		})
	}

	admitted := map[string]*corev1.Pod{
		"the largest card exactly": pod("fits", gpu("24")),
		"two whole cards":          pod("whole-two", whole("2")),
		"a pod asking no GPU":      {ObjectMeta: metav1.ObjectMeta{Name: "cpu", Namespace: users}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}},
	}
	for name, p := range admitted {
		if _, err := c.Client.CoreV1().Pods(users).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}

	// A node with larger cards joins: the bound follows it.
	gpuNode(ctx, t, c, "adm-b", "1x80GiB:NVIDIA-H100")
	waitCardLimit(ctx, t, c, system, "80")
	if _, err := c.Client.CoreV1().Pods(users).Create(ctx, pod("now-fits", gpu("40")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("40 units with an 80-unit card in the cluster: refused: %v", err)
	}
	_, err = c.Client.CoreV1().Pods(users).Create(ctx, pod("still-huge", gpu("81")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "the largest card in this cluster has 80 units (NVIDIA H100)") {
		t.Errorf("81 units: err = %v, want the refusal naming the 80-unit card", err)
	}
}

// admissionLabel marks the namespaces a test's policies apply to: its value
// is the test's release namespace.
const admissionLabel = "gpushare-e2e/admission"

// enforceAdmission makes the policies of the release in system apply to
// namespace ns.
func enforceAdmission(ctx context.Context, t *testing.T, c *cluster.Cluster, system, ns string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, admissionLabel, system)
	if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// applyAdmissionPolicies renders the chart's admission templates for a release
// in namespace system and applies it to the cluster, with each policy binding
// narrowed to the namespaces labelled for this release (enforceAdmission), so
// the rest of the suite is not affected (cluster-scoped objects, Nodes, are
// still matched: the policy for them concerns the release's own device plugin
// identity only). The objects are deleted when the test ends.
func applyAdmissionPolicies(ctx context.Context, t *testing.T, c *cluster.Cluster, system string, set ...string) {
	t.Helper()
	applyAdmissionPolicySubset(ctx, t, c, system, nil, set...)
}

// applyAdmissionPolicySubset is applyAdmissionPolicies keeping only the named
// policies (their bindings, and the ConfigMap and its Role(Binding)); nil
// keeps all. With dra.enabled=true in set it also applies the policies of
// templates/dra.yaml (not its DeviceClass, which the DRA tests create).
func applyAdmissionPolicySubset(ctx context.Context, t *testing.T, c *cluster.Cluster, system string, only []string, set ...string) {
	t.Helper()
	// One template per policy (templates/admission-*.yaml), and with DRA the
	// policies of templates/dra.yaml (the DRA tests keep their own
	// DeviceClass): the whole chart is rendered, since a template that
	// renders nothing cannot be named to helm's --show-only.
	ours := regexp.MustCompile(`# Source: [^/\n]+/templates/(admission-[a-z-]+|dra)\.yaml\n`)
	out := renderChart(ctx, t, system, "", set...)
	var docs [][]byte
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		if !ours.Match(doc) {
			continue
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("rendered admission templates: %v\n%s", err, doc)
		}
		if len(obj.Object) == 0 || obj.GetKind() == "DeviceClass" {
			continue
		}
		if only != nil && strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") && !slices.Contains(only, obj.GetName()) {
			continue
		}
		if obj.GetKind() == "ValidatingAdmissionPolicyBinding" {
			if err := unstructured.SetNestedStringMap(obj.Object, map[string]string{admissionLabel: system}, "spec", "matchResources", "namespaceSelector", "matchLabels"); err != nil {
				t.Fatal(err)
			}
		}
		b, err := yaml.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	if only == nil && len(docs) < 13 {
		t.Fatalf("the admission templates rendered %d objects, want the five policies, their bindings, the ConfigMap and its Role(Binding):\n%s", len(docs), out)
	}
	file := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(file, bytes.Join(docs, []byte("\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the chart's admission policies: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file)
	})
}

// waitCardLimit waits until the card-limits ConfigMap says units.
func waitCardLimit(ctx context.Context, t *testing.T, c *cluster.Cluster, namespace, units string) {
	t.Helper()
	var last map[string]string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := c.Client.CoreV1().ConfigMaps(namespace).Get(ctx, api.CardLimitsConfigMap, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = cm.Data
		return cm.Data[api.CardLimitsKeyMaxUnits] == units, nil
	})
	if err != nil {
		t.Fatalf("card-limits ConfigMap: want %s=%s, last data %v: %v", api.CardLimitsKeyMaxUnits, units, last, err)
	}
}

// waitAdmissionRefuses waits until the request-size policy refuses, in
// namespace ns, a pod asking largest+1 units (a dry run) with a message that
// names largest: the policies take effect a moment after they are created,
// and until the API server has read the parameter the policy admits
// (parameterNotFoundAction Allow). Any other answer — admitted, or refused
// for another reason — is waited out (see keepConfigMapParams for why a
// refusal of any kind is not proof enough).
func waitAdmissionRefuses(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, largest int64) {
	t.Helper()
	want := fmt.Sprintf("the largest card in this cluster has %d units", largest)
	var last error
	seen := map[string]bool{}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "admission-probe", largest+1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if last != nil && strings.Contains(last.Error(), want) {
			return true, nil
		}
		if answer := fmt.Sprint(last); !seen[answer] {
			seen[answer] = true
			t.Logf("admission probe (%d units): %s; waiting for the request-size policy", largest+1, answer)
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the request-size policy does not refuse a pod asking %d units in %s saying %q; last answer: %v (%v)", largest+1, ns, want, last, err)
	}
}

// renderChart renders one template of the chart, or all of it when template
// is "" (helm template, release gpushare in namespace) with extra helm flags set.
func renderChart(ctx context.Context, t *testing.T, namespace, template string, set ...string) []byte {
	t.Helper()
	root := cluster.RepoRoot()
	helm, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "tools.sh"), "helm").Output()
	if err != nil {
		t.Fatalf("hack/tools.sh helm: %v", err)
	}
	args := append([]string{"template", "gpushare", filepath.Join(root, "charts", "gpushare"),
		"--kube-version", k8sversion.Current(), "--namespace", namespace}, set...)
	if template != "" {
		args = append(args, "--show-only", template)
	}
	out, err := exec.CommandContext(ctx, strings.TrimSpace(string(helm)), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", template, err, out)
	}
	return out
}

// keepConfigMapParams creates, for the whole suite, a ValidatingAdmissionPolicy
// with ConfigMap parameters and a binding that match nothing. kube-apiserver
// v1.34 watches ConfigMaps for policy parameters only while a bound policy
// has them, and once the last such policy is deleted the informer it stopped
// is never started again: its shared informer factory hands the stopped
// informer to the next policy (k8s.io/apiserver
// pkg/admission/plugin/policy/generic/policy_source.go,
// ensureParamsForPolicyLocked; kubernetes/kubernetes#133827). Every later
// binding then finds no parameter, and the chart's request-size policy
// (parameterNotFoundAction Allow) admits every size. The suite's tests
// apply and delete the chart's policies one after another; this keeps the
// watch alive (docs/troubleshooting.md has what that means for a cluster).
func keepConfigMapParams(ctx context.Context, c *cluster.Cluster) error {
	const name = "e2e-keep-configmap-params"
	ignore, allow := admissionv1.Ignore, admissionv1.AllowAction
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &ignore,
			ParamKind:     &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"limitranges"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "true"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Audit},
			ParamRef:          &admissionv1.ParamRef{Name: name, Namespace: metav1.NamespaceDefault, ParameterNotFoundAction: &allow},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{name: "never"},
			}},
		},
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the policy that keeps ConfigMap parameters watched: %w", err)
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the binding that keeps ConfigMap parameters watched: %w", err)
	}
	return nil
}
