package app

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/cli"
)

const node = "gpu-node"

// defaults are the options as the flags set them with nothing given.
func defaults(t *testing.T, args ...string) (*Options, *pflag.FlagSet) {
	t.Helper()
	d := DefaultOptions()
	o := &d
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o, fs
}

func TestEnvironmentSetsFlagsTheCommandLineWins(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	t.Setenv("GPUSHARE_MEMORY_UNIT", "MiB")
	t.Setenv("GPUSHARE_DEVICE_ID_STRATEGY", "index")
	o, fs := defaults(t, "--device-id-strategy=uuid")
	if err := cli.ApplyEnv(fs, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "from-env" || o.MemoryUnit != "MiB" || o.DeviceIDStrategy != "uuid" {
		t.Errorf("options = %+v", o)
	}
	t.Setenv("GPUSHARE_HEALTH_CHECKS", "maybe")
	if err := cli.ApplyEnv(fs, os.LookupEnv); err == nil || !strings.Contains(err.Error(), "GPUSHARE_HEALTH_CHECKS") {
		t.Errorf("a bad env value: err = %v, want one naming the variable", err)
	}
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"no node name", func(o *Options) { o.NodeName = "" }, "set NODE_NAME from the downward API"},
		{"node does not exist", func(o *Options) { o.NodeName = "other"; o.NVML = "spec:1x8GiB" }, `NODE_NAME is "other" but no such Node exists`},
		{"no NVML on this machine", func(o *Options) {}, "libnvidia-ml.so.1 not found"},
		{"a unit too small for the kubelet's message limit", func(o *Options) { o.NVML = "mock:dgxa100"; o.MemoryUnit = "MiB" }, "over the kubelet's limit of 4194304 bytes"},
		{"unknown strategy", func(o *Options) { o.DeviceListStrategy = "cdi" }, `unknown device list strategy "cdi"`},
		{"bad spec", func(o *Options) { o.NVML = "spec:4x" }, "must end in GiB or MiB"},
		{"no API budget", func(o *Options) { o.NVML = "spec:1x8GiB"; o.KubeAPIQPS = 0 }, "kubeAPIQPS 0 and kubeAPIBurst 100 must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := defaults(t)
			o.NodeName = node
			tt.modify(o)
			_, ctx := ktesting.NewTestContext(t)
			err := Run(ctx, *o, Clients{Write: client}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestRunWaitsWithoutNVMLWhenAsked(t *testing.T) {
	if _, err := nvml.Open(gonvml.New(), nvml.Options{}); err == nil {
		t.Skip("this machine has NVML")
	}
	o, _ := defaults(t, "--fail-on-init-error=false")
	o.NodeName = node
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- Run(ctx, *o, Clients{Write: fake.NewClientset()}, nil) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v without NVML; want it to wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	got chan string
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.got <- req.ResourceName
	return &pluginapi.Empty{}, nil
}

func TestRunPublishesInventoryAndFollowsIsolation(t *testing.T) {
	dir, err := os.MkdirTemp("", "gdpapp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{got: make(chan string, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, reg)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	isoFile := filepath.Join(dir, "isolation.json")
	o, _ := defaults(t, "--nvml=spec:1x80GiB:NVIDIA-H100,1x40GiB:NVIDIA-A100", "--device-plugin-dir="+dir, "--pod-resources-socket=", "--isolation-file="+isoFile)
	o.NodeName = node
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- Run(ctx, *o, Clients{Write: client}, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case got := <-reg.got:
		if got != string(api.DefaultNames().ResourceName()) {
			t.Errorf("registered %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no registration")
	}

	expect := func(what string, want []string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			inv, err := api.DefaultNames().InventoryFromNode(n)
			if err != nil {
				return false, nil
			}
			got = nil
			for _, c := range inv.Cards {
				got = append(got, c.Model+"/"+string(c.State))
			}
			got = append(got, n.Labels[api.DefaultNames().LabelGPUModel()], n.Labels[api.DefaultNames().LabelGPUMemory()])
			return strings.Join(got, " ") == strings.Join(want, " "), nil
		})
		if err != nil {
			t.Fatalf("%s: node shows %v, want %v", what, got, want)
		}
	}
	expect("published at start", []string{"NVIDIA H100/healthy", "NVIDIA A100/healthy", "mixed", "80GiB"})

	n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	n.Annotations[api.DefaultNames().AnnotationIsolation()] = "1"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("isolated by annotation", []string{"NVIDIA H100/healthy", "NVIDIA A100/isolated", "mixed", "80GiB"})

	if err := os.WriteFile(isoFile, []byte(`{"index":[0]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("isolated by file too", []string{"NVIDIA H100/isolated", "NVIDIA A100/isolated", "mixed", "80GiB"})

	n, _ = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	delete(n.Annotations, api.DefaultNames().AnnotationIsolation())
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(isoFile); err != nil {
		t.Fatal(err)
	}
	expect("lifted", []string{"NVIDIA H100/healthy", "NVIDIA A100/healthy", "mixed", "80GiB"})
}

// A malformed isolation annotation isolates every card of the node until it
// is fixed (isolation.InForce: the extender filters such a node too), even
// when no isolation was in force before; fixing it puts its value in force.
func TestMalformedIsolationAnnotationIsolatesEveryCardUntilFixed(t *testing.T) {
	dir, err := os.MkdirTemp("", "gdpapp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{got: make(chan string, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, reg)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	o, _ := defaults(t, "--nvml=spec:2x40GiB:NVIDIA-A100", "--device-plugin-dir="+dir, "--pod-resources-socket=")
	o.NodeName = node
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{api.DefaultNames().AnnotationIsolation(): "card-one"}}})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- Run(ctx, *o, Clients{Write: client}, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	expect := func(what string, want string) {
		t.Helper()
		var got string
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			inv, err := api.DefaultNames().InventoryFromNode(n)
			if err != nil {
				return false, nil
			}
			var states []string
			for _, c := range inv.Cards {
				states = append(states, string(c.State))
			}
			got = strings.Join(states, " ")
			return got == want, nil
		})
		if err != nil {
			t.Fatalf("%s: cards %q, want %q", what, got, want)
		}
	}
	expect("malformed at start", "isolated isolated")
	n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	n.Annotations[api.DefaultNames().AnnotationIsolation()] = "1"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("fixed", "healthy isolated")
	n, _ = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	n.Annotations[api.DefaultNames().AnnotationIsolation()] = "1,oops"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("broken again", "isolated isolated")
}
