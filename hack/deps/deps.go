//go:build tools

// Package deps pins the module dependencies while the programs are being written.
package deps

import (
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/util/retry"
	_ "github.com/gin-gonic/gin"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "google.golang.org/grpc"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/podresources/v1"
	_ "k8s.io/cli-runtime/pkg/genericclioptions"
	_ "k8s.io/kube-scheduler/extender/v1"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "sigs.k8s.io/yaml"
	_ "github.com/spf13/cobra"
	_ "k8s.io/klog/v2"
	_ "k8s.io/utils/clock"
)
