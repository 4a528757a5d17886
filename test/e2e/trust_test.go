package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Tenants cannot forge or move the assignment records that decide who shares
// which card, and a GPU node's agent cannot write outside its node: the
// chart's admission policies on the real API server, tried as an ordinary
// user (bound to the built-in `edit` role in its namespace), as someone
// allowed to bind pods, and as the device plugin's service account with the
// token of a plugin pod on node A (which carries node A's name).
func TestAdmissionKeepsRecordsOutOfTenantsHands(t *testing.T) {
	c := setup(t)
	needExtender(t)
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	system := testNamespace(ctx, t, c, "gpushare-system")
	users := testNamespace(ctx, t, c, "tenant")
	applyAdmissionPolicies(ctx, t, c, system)

	// Two GPU pods with records, one per node, bound by the extender before
	// the policies apply to the namespace (the suite's extender runs with the
	// admin's credentials, not the chart's service account).
	nodeA, _ := gpuNode(ctx, t, c, "trust-a", "1x40GiB:NVIDIA-A100")
	nodeB, _ := gpuNode(ctx, t, c, "trust-b", "1x40GiB:NVIDIA-A100")
	onNode := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		return p
	}
	podA := runPod(ctx, t, c, onNode(gpuPod(users, "pod-a", 10), "trust-a"), nodeA)
	podB := runPod(ctx, t, c, onNode(gpuPod(users, "pod-b", 10), "trust-b"), nodeB)
	checkCards(ctx, t, c, podA)
	checkCards(ctx, t, c, podB)
	enforceAdmission(ctx, t, c, system, users)

	alice := impersonate(t, c, "alice")
	grant(ctx, t, c, users, "alice", "ClusterRole", "edit")

	recordPatch := func(pod *corev1.Pod, edit func(*api.Assignment)) []byte {
		t.Helper()
		got, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := api.DefaultNames().AssignmentFromPod(got)
		if err != nil {
			t.Fatal(err)
		}
		edit(&a)
		s, err := api.EncodeAssignment(a)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.DefaultNames().AnnotationAssignment(): s}}})
		return b
	}
	removeRecord := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, api.DefaultNames().AnnotationAssignment()))

	// The policies take effect a moment after they are created and the
	// namespace is labelled: wait for the first denial.
	var denial string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := alice.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, recordPatch(podA, func(a *api.Assignment) { a.Containers[0].Units = 40 }), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			denial = err.Error()
		}
		return err != nil, nil
	}); err != nil {
		t.Fatalf("alice (edit) raised her pod's record to the whole card: allowed; want it refused")
	}

	t.Run("an editor patching her pod's record is refused", func(t *testing.T) {
		wantError(t, denial, nil, "changing the annotation gpushare.example.com/assignment is refused", "alice may not write it", "delete the pod and create it again")
		_, err := alice.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, removeRecord, metav1.PatchOptions{})
		wantError(t, "", err, "removing the annotation gpushare.example.com/assignment is refused")
		// Her other edits still work.
		if _, err := alice.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"ml"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("alice labelling her pod: %v, want allowed", err)
		}
	})

	t.Run("a pod created with a copied record is refused", func(t *testing.T) {
		got, err := c.Client.CoreV1().Pods(users).Get(ctx, "pod-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		copied := gpuPod(users, "copy", 10)
		copied.Annotations = map[string]string{api.DefaultNames().AnnotationAssignment(): got.Annotations[api.DefaultNames().AnnotationAssignment()]}
		_, err = alice.CoreV1().Pods(users).Create(ctx, copied, metav1.CreateOptions{})
		wantError(t, "", err, "carries the annotation gpushare.example.com/assignment at creation", "Remove the annotation")
	})

	t.Run("a pod bypassing the scheduler is refused, and a Deployment of them says why", func(t *testing.T) {
		bypass := gpuPod(users, "bypass", 10)
		bypass.Spec.NodeName = "trust-a"
		_, err := alice.CoreV1().Pods(users).Create(ctx, bypass, metav1.CreateOptions{})
		wantError(t, "", err, "sets spec.nodeName (trust-a), which bypasses the gpushare scheduler", "Remove spec.nodeName", "kubernetes.io/hostname: trust-a")

		other := gpuPod(users, "other-scheduler", 10)
		other.Spec.SchedulerName = "default-scheduler"
		_, err = alice.CoreV1().Pods(users).Create(ctx, other, metav1.CreateOptions{})
		wantError(t, "", err, "with schedulerName default-scheduler, which does not place it on a card: set schedulerName to "+schedulerName)

		labels := map[string]string{"app": "bypass"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "bypass", Namespace: users},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: bypass.Spec},
			},
		}
		if _, err := alice.AppsV1().Deployments(users).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice creating the Deployment: %v", err)
		}
		var msg string
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := c.Client.CoreV1().Events(users).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
			if err != nil {
				return false, nil
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Kind == "ReplicaSet" && strings.Contains(e.Message, "bypasses the gpushare scheduler") {
					msg = e.Message
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no FailedCreate event on the Deployment's ReplicaSet naming the policy's message: %v", err)
		}
		t.Logf("ReplicaSet event: %s", msg)
		if pods, _ := c.Client.CoreV1().Pods(users).List(ctx, metav1.ListOptions{LabelSelector: "app=bypass"}); len(pods.Items) != 0 {
			t.Errorf("%d bypass pods exist, want none", len(pods.Items))
		}
	})

	t.Run("only the extender binds with a record", func(t *testing.T) {
		mallory := impersonate(t, c, "mallory")
		binder := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "binder", Namespace: users},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}}},
		}
		if _, err := c.Client.RbacV1().Roles(users).Create(ctx, binder, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grant(ctx, t, c, users, "mallory", "Role", "binder")
		idle := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: users}, Spec: corev1.PodSpec{
			SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if _, err := c.Client.CoreV1().Pods(users).Create(ctx, idle, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, _ := c.Client.CoreV1().Pods(users).Get(ctx, "pod-a", metav1.GetOptions{})
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: users, Annotations: map[string]string{api.DefaultNames().AnnotationAssignment(): got.Annotations[api.DefaultNames().AnnotationAssignment()]}},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "trust-a"},
		}
		err := mallory.CoreV1().Pods(users).Bind(ctx, b, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "only the gpushare extender may bind a pod with gpushare.example.com/ annotations", "mallory may not")
		b.Annotations = nil
		if err := mallory.CoreV1().Pods(users).Bind(ctx, b, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("mallory binding without a record: %v, want allowed (RBAC gave her the right)", err)
		}
	})

	t.Run("binding with a record through the legacy bindings resource is refused", func(t *testing.T) {
		// POST /api/v1/namespaces/NS/bindings copies the Binding's
		// annotations onto the pod like pods/binding does.
		eve := impersonate(t, c, "eve")
		legacy := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy-binder", Namespace: users},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"bindings"}, Verbs: []string{"create"}}},
		}
		if _, err := c.Client.RbacV1().Roles(users).Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grant(ctx, t, c, users, "eve", "Role", "legacy-binder")
		idle := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "idle-legacy", Namespace: users}, Spec: corev1.PodSpec{
			SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if _, err := c.Client.CoreV1().Pods(users).Create(ctx, idle, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, _ := c.Client.CoreV1().Pods(users).Get(ctx, "pod-a", metav1.GetOptions{})
		b := &corev1.Binding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"},
			ObjectMeta: metav1.ObjectMeta{Name: "idle-legacy", Namespace: users, Annotations: map[string]string{api.DefaultNames().AnnotationAssignment(): got.Annotations[api.DefaultNames().AnnotationAssignment()]}},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "trust-a"},
		}
		post := func(b *corev1.Binding) error {
			return eve.CoreV1().RESTClient().Post().Namespace(users).Resource("bindings").
				Param("dryRun", metav1.DryRunAll).Body(b).Do(ctx).Error()
		}
		wantError(t, "", post(b), "only the gpushare extender may bind a pod with gpushare.example.com/ annotations", "eve may not")
		b.Annotations = nil
		if err := post(b); err != nil {
			t.Errorf("eve binding without a record through bindings: %v, want allowed (RBAC gave her the right)", err)
		}
	})

	t.Run("removing or rewriting a record through pods/status is refused", func(t *testing.T) {
		// An identity that may update pod status (a controller's, a second
		// scheduler's): the API server keeps metadata changes made there.
		trent := impersonate(t, c, "trent")
		status := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "status-writer", Namespace: users},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch", "update"}}},
		}
		if _, err := c.Client.RbacV1().Roles(users).Create(ctx, status, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grant(ctx, t, c, users, "trent", "Role", "status-writer")
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		_, err := trent.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, removeRecord, dry, "status")
		wantError(t, "", err, "removing the annotation gpushare.example.com/assignment is refused", "trent may not write it")
		_, err = trent.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, recordPatch(podA, func(a *api.Assignment) { a.Containers[0].Units = 40 }), dry, "status")
		wantError(t, "", err, "changing the annotation gpushare.example.com/assignment is refused")
		// Status itself is still hers to write.
		if _, err := trent.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"status":{"conditions":[{"type":"Example","status":"True"}]}}`), dry, "status"); err != nil {
			t.Errorf("trent patching status: %v, want allowed", err)
		}
	})

	t.Run("a pod that asks for no GPU cannot reach the cards through the runtime", func(t *testing.T) {
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		// The toolkit's own rule, every container kind and spelling of it.
		for _, tc := range []struct {
			name  string
			pod   *corev1.Pod
			where string
		}{
			{"device-list", toolkitDeviceRequest(users, "device-list", "/var/run/nvidia-container-devices/all"), "container c mounts a volume at /var/run/nvidia-container-devices/all"},
			{"with spec.nodeName", withNodeName(toolkitDeviceRequest(users, "device-list-pinned", "/var/run/nvidia-container-devices/all"), "trust-a"), "container c mounts a volume at"},
			{"the CDI form", toolkitDeviceRequest(users, "cdi", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/all"), "at /var/run/nvidia-container-devices/cdi/nvidia.com/gpu/all"},
			{"a path that cleans to the root", toolkitDeviceRequest(users, "unclean", "//var/run/./x/../nvidia-container-devices//all/"), "at //var/run/./x/../nvidia-container-devices//all/"},
			{"the string prefix without a slash", toolkitDeviceRequest(users, "prefix", "/var/run/nvidia-container-devicesall"), "at /var/run/nvidia-container-devicesall"},
			{"an init container", asInitContainer(toolkitDeviceRequest(users, "init", "/var/run/nvidia-container-devices/all")), "init container c mounts a volume at"},
		} {
			_, err := alice.CoreV1().Pods(users).Create(ctx, tc.pod, dry)
			wantError(t, tc.name, err, tc.where, "reads mounts under /var/run/nvidia-container-devices as requests for GPUs", "ask for example.com/gpu-mem")
		}
		// An ephemeral container added to a running pod.
		running, err := c.Client.CoreV1().Pods(users).Get(ctx, "pod-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Its volumes cannot change: the rule is the mount path, whatever the volume.
		if len(running.Spec.Volumes) == 0 {
			t.Fatalf("pod-a has no volume to mount in an ephemeral container")
		}
		running.Spec.EphemeralContainers = append(running.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{{Name: running.Spec.Volumes[0].Name, MountPath: "/var/run/nvidia-container-devices/all"}}}})
		_, err = c.Client.CoreV1().Pods(users).UpdateEphemeralContainers(ctx, "pod-a", running, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "ephemeral container", err, "ephemeral container debug mounts a volume at /var/run/nvidia-container-devices/all")
		// The host's device nodes or /dev/null, however the path is spelled.
		for _, path := range []string{"/dev/null", "/dev//null", "/dev/./nvidia0", "/dev/nvidia-uvm", "/dev/char/195:0", "/dev", "/dev/", "/"} {
			p := toolkitDeviceRequest(users, "host-path", "/data")
			p.Spec.Volumes[0].HostPath.Path = path
			_, err := alice.CoreV1().Pods(users).Create(ctx, p, dry)
			wantError(t, "host path "+path, err, "this pod mounts the host path "+path+", which is or holds /dev/null or the NVIDIA device nodes", "remove that volume")
		}
		sneak := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: users}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
			edit(p)
			return p
		}
		_, err = alice.CoreV1().Pods(users).Create(ctx, sneak("visible-all", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		}), dry)
		wantError(t, "", err, "container c sets NVIDIA_VISIBLE_DEVICES or an MPS variable", "Remove them from the pod spec")
		_, err = alice.CoreV1().Pods(users).Create(ctx, sneak("mps-unlimited", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "registry.k8s.io/pause:3.10", Env: []corev1.EnvVar{{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=80G"}}}}
		}), dry)
		wantError(t, "", err, "container init sets NVIDIA_VISIBLE_DEVICES or an MPS variable")
		// Other volumes and host paths stay allowed.
		ok := toolkitDeviceRequest(users, "data", "/data")
		ok.Spec.Volumes[0].HostPath.Path = "/srv/data"
		if _, err := alice.CoreV1().Pods(users).Create(ctx, ok, dry); err != nil {
			t.Errorf("a host path /srv/data mounted at /data: %v, want allowed", err)
		}
		// The release's own namespace (the plugin's pod) is not matched, even
		// with the policies bound to it.
		enforceAdmission(ctx, t, c, system, system)
		if _, err := c.Client.CoreV1().Pods(system).Create(ctx, toolkitDeviceRequest(system, "plugin-like", "/var/run/nvidia-container-devices/all"), dry); err != nil {
			t.Errorf("a device-list mount in the release namespace: %v, want allowed", err)
		}
	})

	t.Run("privileged pods are refused outside the namespaces the operator allows", func(t *testing.T) {
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, err := alice.CoreV1().Pods(users).Create(ctx, privilegedPod(users, "priv"), dry)
		wantError(t, "privileged", err, "container c is privileged: a privileged container sees every GPU of its node", "namespace "+users+" may not run one", "label the namespace gpushare.example.com/privileged-pods=allowed")
		init := privilegedPod(users, "priv-init")
		init.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "registry.k8s.io/pause:3.10", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		init.Spec.Containers[0].SecurityContext = nil
		_, err = alice.CoreV1().Pods(users).Create(ctx, init, dry)
		wantError(t, "privileged init", err, "init container i is privileged")
		allowed := testNamespace(ctx, t, c, "privileged-ok")
		enforceAdmission(ctx, t, c, system, allowed)
		if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, allowed, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.DefaultNames().LabelPrivilegedPods(), api.CardPinningAllowed)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().Pods(allowed).Create(ctx, privilegedPod(allowed, "priv"), dry); err != nil {
			t.Errorf("a privileged pod in a namespace labelled privileged-pods=allowed: %v, want allowed", err)
		}
	})

	t.Run("only the node's own plugin writes its inventory and record key", func(t *testing.T) {
		// nora may patch Nodes (a node controller's, a labeller's rights).
		nora := impersonate(t, c, "nora")
		patcher := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-patcher-"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "patch", "update"}}}}
		role, err := c.Client.RbacV1().ClusterRoles().Create(ctx, patcher, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "nora"}}}
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
			_ = c.Client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		})
		// The RBAC authorizer learns the binding from its informer (as in grant): until it allows
		// nora's patch, RBAC, not the policy under test, would refuse it.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "nora", Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes"},
			}}, metav1.CreateOptions{})
			return err == nil && r.Status.Allowed, nil
		}); err != nil {
			t.Fatalf("nora's node-patcher binding is not in force after 30s: %v", err)
		}
		names := api.DefaultNames()
		fourTimes := `{"version":1,"unit":"GiB","cards":[{"index":0,"uuid":"GPU-x","model":"NVIDIA-A100","units":160}]}`
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		for _, tc := range []struct{ what, patch, sub string }{
			{"inventory", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, names.AnnotationInventory(), fourTimes), ""},
			{"record key", fmt.Sprintf(`{"metadata":{"annotations":{%q:"AAAA"}}}`, names.AnnotationRecordKey()), ""},
			{"inventory removed", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, names.AnnotationInventory()), ""},
			{"inventory through nodes/status", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, names.AnnotationInventory(), fourTimes), "status"},
		} {
			var subresources []string
			if tc.sub != "" {
				subresources = []string{tc.sub}
			}
			_, err := nora.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(tc.patch), dry, subresources...)
			wantError(t, tc.what, err, "nora may not write the annotations gpushare.example.com/inventory or gpushare.example.com/record-key of Node trust-a", "admission.nodeRecordWriters")
		}
		// Her other node edits, and the node's own plugin, are not refused.
		if _, err := nora.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/rack":"r1"}}}`), dry); err != nil {
			t.Errorf("nora annotating the node otherwise: %v, want allowed", err)
		}
		// (The node's own plugin writing them: "the device plugin's identity writes only its own node".)
	})

	t.Run("the device plugin's identity writes only its own node", func(t *testing.T) {
		plugin := pluginIdentityOn(ctx, t, c, system, "trust-a")

		_, err := plugin.CoreV1().Pods(users).Patch(ctx, "pod-b", types.MergePatchType, recordPatch(podB, func(a *api.Assignment) { a.Phase = api.PhaseAssigned }), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may write only pods bound to its own node: this token is for node trust-a, the pod is on node trust-b")
		_, err = plugin.CoreV1().Nodes().Patch(ctx, "trust-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"gpushare.example.com/gpu-count":"8"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may update only its own Node: this token is for node trust-a, not trust-b")

		// On its own node: what the plugin owns is allowed …
		if _, err := plugin.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, recordPatch(podA, func(a *api.Assignment) { a.Phase = api.PhaseAssigned }), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("plugin on trust-a setting its pod's record phase: %v, want allowed", err)
		}
		if _, err := plugin.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"gpushare.example.com/gpu-count":"1"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("plugin on trust-a writing its Node's gpushare label: %v, want allowed", err)
		}
		if _, err := plugin.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"AAAA"}}}`, api.DefaultNames().AnnotationRecordKey())), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("plugin on trust-a writing its Node's record key: %v, want allowed", err)
		}
		// … and nothing else.
		_, err = plugin.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, api.DefaultNames().AnnotationAssignment())), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may neither add nor remove the record")
		// What a record says is the record's own business (api): a plugin's
		// record that grants more than the pod asks is written, and counted
		// by neither the extender nor a plugin (TrustedAssignment matches it
		// to the pod before it checks the signature).
		greedy, err := plugin.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, recordPatch(podA, func(a *api.Assignment) { a.Containers[0].Units = 40 }), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("plugin on trust-a correcting its pod's record: %v, want admitted", err)
		}
		_, err = api.DefaultNames().TrustedAssignment(greedy, api.RecordKeys{})
		wantError(t, "", err, `container "c0" requests 10 units, the record grants 40`)
		_, err = plugin.CoreV1().Pods(users).Patch(ctx, "pod-a", types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"c0","image":"registry.k8s.io/pause:3.9"}]}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may change nothing on a pod but the annotation gpushare.example.com/assignment")
		_, err = plugin.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may change only the annotations gpushare.example.com/inventory and gpushare.example.com/record-key and the")
		_, err = plugin.CoreV1().Nodes().Patch(ctx, "trust-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may change only the annotations gpushare.example.com/inventory and gpushare.example.com/record-key and the")

		// Events and evictions: only about its own node. A Warning Event on
		// a pod of node B (as the memory enforcer writes them), an eviction
		// of that pod (enforcement evict), an event on node B. The plugin
		// labels its events on pods and its evictions (only labelled ones
		// reach the pod lookup); an attacker would leave the label off.
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		labelled := map[string]string{api.DefaultNames().LabelDevicePlugin(): "trust-a"}
		event := func(kind, name, host string) *corev1.Event {
			ref := corev1.ObjectReference{Kind: kind, Name: name, APIVersion: "v1"}
			ns := metav1.NamespaceDefault // where events on cluster-scoped objects live
			var labels map[string]string
			if kind == "Pod" {
				ref.Namespace, ns, labels = users, users, labelled
			}
			return &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "forged-", Namespace: ns, Labels: labels},
				InvolvedObject: ref, Type: corev1.EventTypeWarning, Reason: "GPUMemoryOverGrant", Message: "forged",
				Source: corev1.EventSource{Component: "gpushare-device-plugin", Host: host},
			}
		}
		unlabelled := func(e *corev1.Event) *corev1.Event { e.Labels = nil; return e }
		evictWith := func(pod string, labels map[string]string) error {
			return plugin.PolicyV1().Evictions(users).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: users, Labels: labels}, DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		}
		evict := func(pod string) error { return evictWith(pod, labelled) }
		// The pod lookup (a parameter policy) takes effect once the API
		// server has read the pods: wait for the first denial.
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = plugin.CoreV1().Events(users).Create(ctx, event("Pod", "pod-b", "trust-a"), dry)
			return last != nil, nil
		}); err != nil {
			t.Fatalf("the plugin on trust-a wrote an event on pod-b (trust-b): allowed; want refused")
		}
		wantError(t, "", last, "may write events on only pods bound to its own node: this token is for node trust-a, pod pod-b is on node trust-b")
		_, err = plugin.CoreV1().Events(users).Create(ctx, event("Pod", "pod-b", "trust-b"), dry)
		wantError(t, "", err, "the device plugin's identity", "only", "its own node")
		// Events on Nodes live in the default namespace: the policies apply
		// there for the rest of this test.
		enforceAdmission(ctx, t, c, system, metav1.NamespaceDefault)
		t.Cleanup(func() {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, admissionLabel)
			_, _ = c.Client.CoreV1().Namespaces().Patch(context.Background(), metav1.NamespaceDefault, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		})
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = plugin.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, event("Node", "trust-b", "trust-a"), dry)
			return last != nil, nil
		}); err != nil {
			t.Fatalf("the plugin on trust-a wrote an event on Node trust-b: allowed; want refused")
		}
		wantError(t, "", last, "writes events only about its own node", "the event is about Node trust-b")
		wantError(t, "", evict("pod-b"), "may evict only pods bound to its own node: this token is for node trust-a, pod pod-b is on node trust-b")
		// Without the label the pod is not looked up, so the label is required.
		noLabel := "the device plugin's identity labels each event on a pod and each eviction gpushare.example.com/device-plugin=<its node>"
		_, err = plugin.CoreV1().Events(users).Create(ctx, unlabelled(event("Pod", "pod-b", "trust-a")), dry)
		wantError(t, "", err, noLabel, "this event on pod pod-b has no such label: add it")
		wantError(t, "", evictWith("pod-b", nil), noLabel, "this eviction of pod pod-b has no such label: add it")
		// Nor may an update take the label off. The plugin's RBAC grants
		// no update of events: an operator who widens it keeps the check.
		updater := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "event-updater", Namespace: users},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update"}}},
		}
		if _, err := c.Client.RbacV1().Roles(users).Create(ctx, updater, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "plugin-event-updater", Namespace: users},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "event-updater"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gpushare-device-plugin", Namespace: system}},
		}
		if _, err := c.Client.RbacV1().RoleBindings(users).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var own *corev1.Event
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			own, last = plugin.CoreV1().Events(users).Create(ctx, event("Pod", "pod-a", "trust-a"), metav1.CreateOptions{})
			return last == nil, nil
		}); err != nil {
			t.Fatalf("the plugin on trust-a writing a labelled event on its pod-a: %v, want allowed", last)
		}
		stripped := own.DeepCopy()
		stripped.Labels = nil
		_, err = plugin.CoreV1().Events(users).Update(ctx, stripped, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, noLabel, "this event on pod pod-a has no such label")
		moved := stripped.DeepCopy()
		moved.InvolvedObject.Name, moved.InvolvedObject.UID = "pod-b", podB.UID
		_, err = plugin.CoreV1().Events(users).Update(ctx, moved, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "the device plugin's identity", "pod-b")
		moved.Labels = labelled
		_, err = plugin.CoreV1().Events(users).Update(ctx, moved, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "may write events on only pods bound to its own node: this token is for node trust-a, pod pod-b is on node trust-b")
		own.Message = "updated"
		if _, err := plugin.CoreV1().Events(users).Update(ctx, own, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("plugin on trust-a: updating its labelled event on its pod-a: %v, want allowed", err)
		}
		// Its own node's pod and Node: allowed.
		if _, err := plugin.CoreV1().Events(users).Create(ctx, event("Pod", "pod-a", "trust-a"), dry); err != nil {
			t.Errorf("plugin on trust-a: an event on its pod-a: %v, want allowed", err)
		}
		if _, err := plugin.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, event("Node", "trust-a", "trust-a"), dry); err != nil {
			t.Errorf("plugin on trust-a: an event on its Node: %v, want allowed", err)
		}
		if err := evict("pod-a"); err != nil {
			t.Errorf("plugin on trust-a: evicting its pod-a (dry run): %v, want allowed", err)
		}
	})

	t.Run("pinning a card by UUID needs a namespace the operator labelled", func(t *testing.T) {
		// /inspect and the inventory name every card's UUID; a UUID names
		// the victim's card.
		got, err := c.Client.CoreV1().Pods(users).Get(ctx, "pod-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := api.DefaultNames().AssignmentFromPod(got)
		if err != nil {
			t.Fatal(err)
		}
		pin := gpuPod(users, "beside-a", 1)
		pin.Annotations = map[string]string{api.DefaultNames().AnnotationCardUUIDs(): a.Containers[0].CardUUID}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, err = alice.CoreV1().Pods(users).Create(ctx, pin, dry)
		wantError(t, "", err, "pinning a pod to cards by UUID (annotation gpushare.example.com/card-uuids) is reserved to namespaces the cluster operator labelled gpushare.example.com/card-pinning=allowed, and "+users+" is not", "Choose cards by model instead")
		// Adding the annotation to a pod later is refused the same way.
		_, err = alice.CoreV1().Pods(users).Patch(ctx, "pod-a", types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.DefaultNames().AnnotationCardUUIDs(), a.Containers[0].CardUUID)), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantError(t, "", err, "pinning a pod to cards by UUID")
		// By model: anyone.
		byModel := gpuPod(users, "by-model", 1)
		byModel.Annotations = map[string]string{api.DefaultNames().AnnotationCardModels(): "A100"}
		if _, err := alice.CoreV1().Pods(users).Create(ctx, byModel, dry); err != nil {
			t.Errorf("choosing by model: %v, want allowed", err)
		}
		// The operator labels the namespace: pinning is allowed there.
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.DefaultNames().LabelCardPinning(), api.CardPinningAllowed)
		if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, users, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err = alice.CoreV1().Pods(users).Create(ctx, pin, dry)
			return err == nil, nil
		}); err != nil {
			t.Errorf("pinning in a labelled namespace: %v, want allowed", err)
		}
	})
}

// wantError fails unless err (or, when err is nil, msg) is a denial containing every part.
func wantError(t *testing.T, msg string, err error, parts ...string) {
	t.Helper()
	if err != nil {
		msg = err.Error()
	}
	if msg == "" {
		t.Errorf("allowed; want refused with %q", parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("denial %q\nwant it to contain %q", msg, p)
		}
	}
}

// impersonate is a client acting as user name (authenticated, no groups of note).
func impersonate(t *testing.T, c *cluster.Cluster, name string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// grant binds user to a role (kind ClusterRole or Role) in namespace ns.
func grant(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, user, kind, role string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer learns the binding from its informer: wait until
	// it allows the role's first rule, so that the caller's next request is
	// judged with it (under load a request right after the create was
	// refused by RBAC before the policy under test could see it).
	var rules []rbacv1.PolicyRule
	if kind == "ClusterRole" {
		cr, err := c.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rules = cr.Rules
	} else {
		r, err := c.Client.RbacV1().Roles(ns).Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rules = r.Rules
	}
	if len(rules) == 0 || len(rules[0].Verbs) == 0 || len(rules[0].Resources) == 0 || len(rules[0].APIGroups) == 0 {
		return
	}
	resource, sub, _ := strings.Cut(rules[0].Resources[0], "/")
	attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: rules[0].Verbs[0], Group: rules[0].APIGroups[0], Resource: resource, Subresource: sub}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: attrs,
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	}); err != nil {
		t.Fatalf("%s's %s %s is not in force after 30s: %v", user, kind, role, err)
	}
}

// pluginIdentityOn returns a client holding what the device plugin on node
// holds in a real install: the chart's service account and RBAC, and a token
// bound to a plugin pod on that node (so it carries the node's name). set are
// more --set flags for the chart (e.g. dra.enabled=true for its DRA rules).
func pluginIdentityOn(ctx context.Context, t *testing.T, c *cluster.Cluster, system, node string, set ...string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(pluginConfigOn(ctx, t, c, system, node, set...))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// pluginConfigOn is pluginIdentityOn's client configuration: the API server
// and the token.
func pluginConfigOn(ctx context.Context, t *testing.T, c *cluster.Cluster, system, node string, set ...string) *rest.Config {
	t.Helper()
	out := renderChart(ctx, t, system, "templates/deviceplugin.yaml", set...)
	var rbac [][]byte
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "ServiceAccount" || meta.Kind == "ClusterRole" || meta.Kind == "ClusterRoleBinding" {
			rbac = append(rbac, doc)
		}
	}
	if len(rbac) != 3 {
		t.Fatalf("the chart's device plugin template has %d of ServiceAccount, ClusterRole, ClusterRoleBinding:\n%s", len(rbac), out)
	}
	file := filepath.Join(t.TempDir(), "plugin-rbac.yaml")
	if err := os.WriteFile(file, bytes.Join(rbac, []byte("\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the chart's device plugin RBAC: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file) })

	sa := "gpushare-device-plugin"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + node, Namespace: system},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{
			Name: "device-plugin", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
		}}},
	}
	pod, err := c.Client.CoreV1().Pods(system).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(system).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.RESTConfig)
	cfg.BearerToken = tr.Status.Token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The token carries the node's name, as the policies expect.
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Fatalf("the plugin pod's token carries node-name %v, want [%s] (user %s)", got, node, review.Status.UserInfo.Username)
	}
	return cfg
}

// toolkitDeviceRequest is a pod without a GPU request whose container mounts
// the host's /dev/null at mountPath: NVIDIA's toolkit (internal/config/image,
// requestsFromMounts) reads such a mount under
// /var/run/nvidia-container-devices as a request for the card named by the rest.
func toolkitDeviceRequest(ns, name, mountPath string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "all", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/null"}}}},
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			VolumeMounts: []corev1.VolumeMount{{Name: "all", MountPath: mountPath}}}}}}
}

func withNodeName(p *corev1.Pod, node string) *corev1.Pod { p.Spec.NodeName = node; return p }

// asInitContainer moves the pod's container to its init containers, with a
// plain app container beside it.
func asInitContainer(p *corev1.Pod) *corev1.Pod {
	p.Spec.InitContainers = p.Spec.Containers
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}
	return p
}

// privilegedPod is a pod asking for no GPU whose container is privileged.
func privilegedPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
}
