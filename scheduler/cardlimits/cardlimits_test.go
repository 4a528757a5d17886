package cardlimits

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/api"
)

func gpuNode(t *testing.T, name string, units ...int64) *corev1.Node {
	t.Helper()
	inv := api.Inventory{Version: api.InventoryVersion, Unit: api.UnitGiB}
	for i, u := range units {
		inv.Cards = append(inv.Cards, api.Card{Index: i, UUID: name + "-GPU-" + string(rune('a'+i)), Model: "Sim", MemoryMiB: u * 1024, Units: u, State: api.CardHealthy})
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{api.DefaultNames().AnnotationInventory(): s}}}
}

func lister(t *testing.T, nodes ...*corev1.Node) (corelisters.NodeLister, cache.Indexer) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(idx), idx
}

func TestSyncWritesTheLargestCardOnlyWhenItChanges(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpushare-system", Name: api.CardLimitsConfigMap}}
	client := fake.NewClientset(cm)
	nodes, idx := lister(t, gpuNode(t, "a", 23, 23), gpuNode(t, "b", 79))
	p := &Publisher{Nodes: nodes, Client: client, Namespace: "gpushare-system", Name: api.CardLimitsConfigMap}

	changed, err := p.Sync(ctx)
	if err != nil || !changed {
		t.Fatalf("first Sync = %v, %v; want a write", changed, err)
	}
	got, _ := client.CoreV1().ConfigMaps("gpushare-system").Get(ctx, api.CardLimitsConfigMap, metav1.GetOptions{})
	want := map[string]string{api.CardLimitsKeyMaxUnits: "79", api.CardLimitsKeyUnit: "GiB", api.CardLimitsKeyModel: "Sim"}
	if diff := cmp.Diff(want, got.Data); diff != "" {
		t.Fatalf("ConfigMap data (-want +got):\n%s", diff)
	}

	client.ClearActions()
	if changed, err := p.Sync(ctx); err != nil || changed {
		t.Fatalf("Sync with nothing new = %v, %v; want no write", changed, err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("unexpected %s with nothing new", a.GetVerb())
		}
	}

	// The 79-unit node leaves: the bound shrinks.
	if err := idx.Delete(gpuNode(t, "b", 79)); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Sync(ctx); err != nil || !changed {
		t.Fatalf("Sync after a node left = %v, %v; want a write", changed, err)
	}
	got, _ = client.CoreV1().ConfigMaps("gpushare-system").Get(ctx, api.CardLimitsConfigMap, metav1.GetOptions{})
	if got.Data[api.CardLimitsKeyMaxUnits] != "23" {
		t.Errorf("after node b left: %v, want maxUnitsPerCard 23", got.Data)
	}

	// No GPU node left: the key goes, so the policy refuses nothing for size.
	if err := idx.Delete(gpuNode(t, "a", 23)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = client.CoreV1().ConfigMaps("gpushare-system").Get(ctx, api.CardLimitsConfigMap, metav1.GetOptions{})
	if len(got.Data) != 0 {
		t.Errorf("no GPU node: data %v, want none", got.Data)
	}
}

func TestSyncNeverCreatesTheConfigMapAndSaysWhatToDo(t *testing.T) {
	client := fake.NewClientset()
	nodes, _ := lister(t, gpuNode(t, "a", 79))
	p := &Publisher{Nodes: nodes, Client: client, Namespace: "gpushare-system", Name: api.CardLimitsConfigMap}
	_, err := p.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--card-limits-configmap") {
		t.Fatalf("Sync without the ConfigMap: err = %v, want one saying to create it or unset the flag", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("Sync created the ConfigMap: %v", a)
		}
	}
}

func TestSyncRetriesAConflict(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "limits"}}
	client := fake.NewClientset(cm)
	conflicts := 1
	client.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, conflictErr()
		}
		return false, nil, nil
	})
	nodes, _ := lister(t, gpuNode(t, "a", 40))
	p := &Publisher{Nodes: nodes, Client: client, Namespace: "ns", Name: "limits"}
	if changed, err := p.Sync(context.Background()); err != nil || !changed {
		t.Fatalf("Sync after one conflict = %v, %v; want the write to land", changed, err)
	}
}

func conflictErr() error {
	return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "limits", errors.New("changed"))
}
