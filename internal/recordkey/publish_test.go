package recordkey_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/internal/recordkey"
)

// The extender publishes the public halves only; what it publishes is what
// a device plugin verifies records with.
func TestPublisherWritesThePublicKeysOnly(t *testing.T) {
	keys := podtest.RotatingKeys("current", podtest.RecordKeys("previous").Current)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}}
	client := fake.NewSimpleClientset(cm)
	p := recordkey.Publisher{Ring: keys, Client: client, Namespace: "ns", Name: "pub"}
	if changed, err := p.Sync(context.Background()); err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	got, err := client.CoreV1().ConfigMaps("ns").Get(context.Background(), "pub", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for k, v := range got.Data {
		files[k] = []byte(v)
	}
	pub, err := api.RecordKeysFrom(files)
	if err != nil || pub.Signer != nil || !pub.Current.Equal(keys.Current) || !pub.Previous.Equal(keys.Previous) {
		t.Errorf("published %v: read back %+v, %v; want the public halves only", got.Data, pub, err)
	}
	a, _ := keys.Sign(api.Assignment{Version: api.AssignmentVersion, PodUID: "u", Node: "n", Unit: api.UnitGiB, Phase: api.PhaseAssigned, Containers: []api.ContainerAssignment{{Name: "c", CardUUID: "GPU-a", Units: 1}}})
	if err := pub.Verify(a); err != nil {
		t.Errorf("a record the extender signed does not verify with the published keys: %v", err)
	}
	if changed, err := p.Sync(context.Background()); err != nil || changed {
		t.Errorf("second Sync = %v, %v; want no change", changed, err)
	}
}
