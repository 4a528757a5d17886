package inspect

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/dratest"
)

// draScenario: nodes served through DRA beside a device-plugin node.
//   - dra-a has no inventory: its cards come from its ResourceSlice. A pod
//     placed by the device plugin before the node moved to DRA still holds
//     8 GiB of card 0, which the slice withholds (it offers 32); claims of
//     10 and 20 GiB share card 0 with it; a claim reserved for no pod holds
//     5 GiB of the unhealthy card 1; a claim names card 5, which the slice
//     does not list; another driver's claim on the node is not ours.
//   - dra-moved keeps the device plugin's last inventory (the kubelet now
//     reports no gpu-mem capacity): a device-plugin pod holds 10 GiB of its
//     card, a claim 15 GiB.
//   - a claim is allocated on node gone, which does not exist.
func draScenario(t *testing.T) []runtime.Object {
	slices := []runtime.Object{
		dratest.SliceHolding("dra-a", api.UnitGiB, map[int]int64{0: 8}, gpu("dra-a", 0, a100, 40), withState(gpu("dra-a", 1, a100, 40), api.CardUnhealthy, "XID 79")).Obj(),
		dratest.SliceHolding("dra-moved", api.UnitGiB, map[int]int64{0: 10}, gpu("dra-moved", 0, h100, 79)).Obj(),
		dratest.Slice("dra-a", api.UnitGiB, gpu("dra-a", 0, a100, 40)).Driver("gpu.nvidia.com").Obj(),
	}
	return append(slices,
		makeNode(t, "dra-a", "10.0.8.1").label(api.DefaultNames().LabelDRA(), "true").obj(),
		makeNode(t, "dra-moved", "10.0.8.2").label(api.DefaultNames().LabelDRA(), "true").inventory(api.UnitGiB, gpu("dra-moved", 0, h100, 79)).capacity(0, 0).obj(),
		makeNode(t, "gpu-b", "10.0.0.2").inventory(api.UnitGiB, gpu("gpu-b", 0, a100, 40)).obj(),
		runningPod("ml", "old").GPU("c", 8).AssignOn("dra-a", api.PhaseAllocated, 0).Obj(),
		runningPod("ml", "ten").Node("dra-a").Obj(),
		runningPod("ml", "twenty").Node("dra-a").Obj(),
		runningPod("ml", "legacy").GPU("c", 10).AssignOn("dra-moved", api.PhaseAllocated, 0).Obj(),
		runningPod("ml", "serve").GPU("c", 12).AssignOn("gpu-b", api.PhaseAllocated, 0).Obj(),
		dratest.Claim("ml", "ten").On("dra-a", 0, "10Gi").ReservedFor("ten").Obj(),
		dratest.Claim("ml", "twenty").On("dra-a", 0, "20Gi").ReservedFor("twenty").Obj(),
		dratest.Claim("research", "idle").On("dra-a", 1, "5Gi").Obj(),
		dratest.Claim("research", "lost").On("dra-a", 5, "4Gi").Obj(),
		dratest.Claim("research", "theirs").Result("gpu.nvidia.com", "dra-a", "card-0", "30Gi").Obj(),
		dratest.Claim("ml", "fifteen").On("dra-moved", 0, "15Gi").ReservedFor("fifteen").Obj(),
		dratest.Claim("ml", "orphan").On("gone", 0, "6Gi").Obj(),
	)
}

// TestClaimsCountOnTheirCards: what each card of the DRA scenario holds,
// by the device plugin's pods and by claims.
func TestClaimsCountOnTheirCards(t *testing.T) {
	v := Build(api.DefaultNames(), cluster(draScenario(t)))
	type card struct {
		Allocated, Claimed, Total int64
		Claims                    []string
		State                     api.CardState
	}
	got := map[string]card{}
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			var claims []string
			for _, cl := range c.Claims {
				claims = append(claims, cl.Namespace+"/"+cl.Name+":"+strings.Join(cl.Pods, ","))
			}
			got[n.Name+"/"+c.UUID] = card{c.Allocated, c.Claimed, c.Total, claims, c.State}
		}
	}
	want := map[string]card{
		"dra-a/GPU-dra-a-0":         {Allocated: 38, Claimed: 30, Total: 40, Claims: []string{"ml/ten:ten", "ml/twenty:twenty"}, State: api.CardHealthy},
		"dra-a/GPU-dra-a-1":         {Allocated: 5, Claimed: 5, Total: 40, Claims: []string{"research/idle:"}, State: api.CardUnhealthy},
		"dra-moved/GPU-dra-moved-0": {Allocated: 25, Claimed: 15, Total: 79, Claims: []string{"ml/fifteen:fifteen"}, State: api.CardHealthy},
		"gpu-b/GPU-gpu-b-0":         {Allocated: 12, Total: 40, State: api.CardHealthy},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	var codes []string
	for _, w := range v.Warnings {
		codes = append(codes, w.Node+":"+w.Claim+":"+string(w.Code))
	}
	// dra-moved's capacity of 0 is expected on a DRA node: no NoCapacity.
	wantCodes := []string{"dra-a:research/lost:UnknownCard", "gone:ml/orphan:NodeUnusable"}
	if diff := cmp.Diff(wantCodes, codes); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// cluster is what Gather would read from a fake API server holding objs.
func cluster(objs []runtime.Object) Cluster {
	var c Cluster
	c.Nodes, c.Pods = split(objs)
	for _, o := range objs {
		switch o := o.(type) {
		case *resourceapi.ResourceSlice:
			c.DRA.Slices = append(c.DRA.Slices, *o)
		case *resourceapi.ResourceClaim:
			c.DRA.Claims = append(c.DRA.Claims, *o)
		}
	}
	return c
}

// runCmdWith is runCmd with a client of the test's.
func runCmdWith(t *testing.T, client *fake.Clientset, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	o.Client = client
	cmd := NewCmd(o)
	cmd.SetArgs(append([]string{}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

// A user who may not list the DRA objects still gets the rest of the view,
// with a warning that says which permission to ask for; a cluster that
// serves no resource.k8s.io/v1 has no DRA to show and no warning.
func TestDRAObjectsTheUserMayNotReadLeaveTheRestOfTheView(t *testing.T) {
	gr := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	for _, tc := range []struct {
		name     string
		err      error
		wantWarn bool
		wantErr  bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, "", errors.New(`User "dev" cannot list resource "resourceclaims"`)), true, false},
		{"not served", apierrors.NewNotFound(gr, ""), false, false},
		{"API server failing", apierrors.NewInternalError(errors.New("etcd down")), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(draScenario(t)...)
			client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			out, err := runCmdWith(t, client)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v\n%s", err, tc.wantErr, out)
			}
			if tc.wantErr {
				return
			}
			if !strings.Contains(out, "gpu-b ") || !strings.Contains(out, "12/40") {
				t.Errorf("the device-plugin node is missing from the view:\n%s", out)
			}
			warned := strings.Contains(out, "DRAUnreadable:") && strings.Contains(out, "--verb=list --resource=resourceslices.resource.k8s.io,resourceclaims.resource.k8s.io")
			if warned != tc.wantWarn {
				t.Errorf("warning of the missing permission shown: %v, want %v:\n%s", warned, tc.wantWarn, out)
			}
		})
	}
}
