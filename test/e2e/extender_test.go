package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/test/cluster"
)

// Issue 5, tests 1 and (part of) 2. A user with one GPU node of an 80 GiB and
// a 40 GiB card asks for 30 GiB: kube-scheduler, through the extender,
// binds the pod to that node and the binpack policy's card (the smallest
// that fits: the 40 GiB one); the container gets exactly that card's mount.
// A pod larger than any card (though not than the node's free total) stays Pending, and its FailedScheduling event
// carries the extender's reason.
func TestExtenderPlacesPodOnPolicyCardAndContainerGetsItsMount(t *testing.T) {
	c := setup(t)
	needRoot(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "ext-node"

	node, inv := gpuNode(ctx, t, c, name, "1x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100")
	t.Cleanup(func() { // before the node goes (cleanups run last first)
		for _, p := range []string{"one", "too-big"} {
			_ = c.Client.CoreV1().Pods("default").Delete(context.Background(), p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	})
	var small api.Card
	for _, card := range inv.Cards {
		if small.UUID == "" || card.Units < small.Units {
			small = card
		}
	}

	createPod(ctx, t, c, "one", "", api.DefaultNames().ResourceName(), 30)
	pod, err := cluster.WaitPod(ctx, c.Client, "default", "one", 2*time.Minute, "Running", cluster.PodRunning)
	if err != nil {
		t.Fatalf("%v\nextender log: %s\nscheduler log: %s\nagent log: %s", err, extender.LogPath, c.LogFile("kube-scheduler"), node.LogFile())
	}
	if pod.Spec.NodeName != name {
		t.Fatalf("pod bound to %q, want %q", pod.Spec.NodeName, name)
	}
	asg, err := api.DefaultNames().AssignmentFromPod(pod)
	if err != nil {
		t.Fatalf("assignment: %v", err)
	}
	ca, ok := asg.Container("main")
	if !ok || ca.CardUUID != small.UUID || ca.Units != 30 {
		t.Errorf("assignment %+v, want container main on the smallest card that fits (%s, %d units) with 30 units", asg, small.UUID, small.Units)
	}

	rec := containerRecord(t, pod, "main")
	var cardMounts []string
	for _, m := range rec.Mounts {
		if strings.HasPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/") {
			cardMounts = append(cardMounts, strings.TrimPrefix(m.ContainerPath, api.VisibleDevicesVolumeRoot+"/"))
		}
	}
	if len(cardMounts) != 1 || cardMounts[0] != ca.CardUUID {
		t.Errorf("container's card mounts %v, want exactly [%s] (record %+v)", cardMounts, ca.CardUUID, rec)
	}
	if got := rec.Env[api.EnvNvidiaVisibleDevices]; got != api.VisibleDevicesVolumeRoot {
		t.Errorf("%s=%q, want %q", api.EnvNvidiaVisibleDevices, got, api.VisibleDevicesVolumeRoot)
	}
	for _, id := range rec.DeviceIDs[string(api.DefaultNames().ResourceName())] {
		if uuid, _, err := api.ParseUnitID(id); err != nil || uuid != ca.CardUUID {
			t.Errorf("kubelet allocated unit %s, not of the assigned card %s", id, ca.CardUUID)
		}
	}
	if n := len(rec.DeviceIDs[string(api.DefaultNames().ResourceName())]); n != 30 {
		t.Errorf("kubelet allocated %d units, want 30", n)
	}

	// Larger than any card but not than the node's free total (80 + 10):
	// kube-scheduler's own fit check passes, the extender refuses; Pending,
	// with the extender's reason in the events.
	createPod(ctx, t, c, "too-big", "", api.DefaultNames().ResourceName(), 85)
	var msg string
	err = wait.PollUntilContextTimeout(ctx, cluster.PollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": "too-big", "reason": "FailedScheduling"}.String()})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for a pod larger than any card: %v", err)
	}
	// The extender's reason names cards; kube-scheduler's own would say
	// "Insufficient example.com/gpu-mem".
	if !strings.Contains(msg, "card") || strings.Contains(msg, "Insufficient") {
		t.Errorf("FailedScheduling message %q does not carry the extender's reason", msg)
	}
	t.Logf("too-big: %s", msg)
	if p, err := c.Client.CoreV1().Pods("default").Get(ctx, "too-big", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("too-big should stay Pending and unbound: %v %v", p.Spec.NodeName, err)
	}
}
