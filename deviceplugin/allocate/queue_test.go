package allocate

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// Queue is queue with the records decoded without keys.
func Queue(pods []*corev1.Pod, st State) []Entry {
	return queue(pods, st, memoDecode(st.Names.OrDefault(), api.RecordKeys{}))
}
