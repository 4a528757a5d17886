package podtest

import (
	"encoding/json"
	"errors"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// APIServerPatches makes client's pod patches answer as kube-apiserver
// does: a merge patch carrying a resourceVersion other than the stored one
// is a conflict, and a JSON patch whose test fails is refused 422 with the
// API server's generic message (handlers/patch.go, applyJSPatch).
func APIServerPatches(client *fake.Clientset) {
	react := k8stesting.ObjectReaction(client.Tracker())
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pa := action.(k8stesting.PatchAction)
		if pa.GetPatchType() == types.MergePatchType {
			var p struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), pa.GetNamespace(), pa.GetName())
			if err == nil && json.Unmarshal(pa.GetPatch(), &p) == nil && p.Metadata.ResourceVersion != "" && p.Metadata.ResourceVersion != stored.(*corev1.Pod).ResourceVersion {
				return true, nil, apierrors.NewConflict(corev1.Resource("pods"), pa.GetName(), errors.New("the object has been modified; please apply your changes to the latest version and try again"))
			}
		}
		handled, obj, err := react(action)
		if err != nil && pa.GetPatchType() == types.JSONPatchType && !apierrors.IsNotFound(err) {
			err = apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
		return handled, obj, err
	})
}
