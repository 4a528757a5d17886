// Package configmapdata keeps the data of a ConfigMap the chart creates
// equal to what a program computes (the extender's card limits, its record
// public keys): the one way both publishers write it.
package configmapdata

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Sync sets the data of the existing ConfigMap namespace/name to want, only
// when it differs (several replicas writing the same data agree), retrying
// on conflict. It reports whether it changed the ConfigMap. A missing
// ConfigMap is an error naming flag, the program's setting that names it.
func Sync(ctx context.Context, client kubernetes.Interface, namespace, name, flag string, want map[string]string) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("ConfigMap %s/%s does not exist: create it (the Helm chart does) or unset %s", namespace, name, flag)
		}
		if err != nil {
			return err
		}
		if maps.Equal(cm.Data, want) { // nil and empty are equal
			return nil
		}
		cm = cm.DeepCopy()
		cm.Data = want
		if _, err := client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		changed = true
		return nil
	})
	return changed, err
}
