package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/adminauth"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/internal/memlimit"
	"github.com/gpushare/gpushare/internal/podtest"
	"github.com/gpushare/gpushare/scheduler/internal/fixture"
	"github.com/gpushare/gpushare/scheduler/server"
)

// parse runs the program's command on args with env as the environment and
// returns the options Run would have been given.
func parse(t *testing.T, args []string, env map[string]string) (Options, error) {
	t.Helper()
	o := DefaultOptions()
	var got Options
	cmd := newCommand(&o, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, func(_ context.Context, o Options) error {
		got = o
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	return got, err
}

func TestOptionsFromFlagsAndEnvironment(t *testing.T) {
	o, err := parse(t, []string{"--policy=spread", "--bind-timeout=8s", "--domain=gpushare.acme.io"}, map[string]string{
		"GPUSHARE_DOMAIN": "ignored.example.com", "GPUSHARE_RESOURCE_NAME": "aliyun.com/gpu-mem",
		"GPUSHARE_POLICY": "binpack", "GPUSHARE_FILTER_MODE": "all", "GPUSHARE_LISTEN": "127.0.0.1:8080", "GPUSHARE_BIND_TIMEOUT": "3s",
		"GPUSHARE_GO_MEMORY_LIMIT_FRACTION": "0.75", "GPUSHARE_GC_PERCENT": "200",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{AdminAuth: adminauth.DefaultOptions(), ListenAddress: "127.0.0.1:8080", Policy: "spread", FilterMode: "all", MaxBestNodes: server.DefaultMaxBestNodes, KubeAPIQPS: 200, KubeAPIBurst: 400, BindTimeout: 8 * time.Second, MaxRequestBytes: server.DefaultMaxBodyBytes, GoMemoryLimitFraction: 0.75, GCPercent: 200,
		Names: cli.NameFlags{Domain: "gpushare.acme.io", ResourceName: "aliyun.com/gpu-mem", WholeResourceName: "example.com/gpu"}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("options: the flag must win over the environment (-want +got):\n%s", diff)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	if _, err := parse(t, nil, map[string]string{"GPUSHARE_RESYNC_PERIOD": "soon"}); err == nil || !strings.Contains(err.Error(), "GPUSHARE_RESYNC_PERIOD") {
		t.Errorf("bad environment value: err = %v, want one naming the variable", err)
	}
	if _, err := parse(t, nil, map[string]string{"GPUSHARE_V": "4"}); err != nil {
		t.Errorf("GPUSHARE_V sets klog's verbosity: %v", err)
	}
}

func TestValidateSaysWhatToChange(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"unknown policy lists the known ones", func(o *Options) { o.Policy = "tetris" }, `policy: unknown policy "tetris": known policies are `},
		{"unknown filter mode", func(o *Options) { o.FilterMode = "some" }, `filterMode: unknown filter mode "some": use "best" or "all"`},
		{"listen address without port", func(o *Options) { o.ListenAddress = "localhost" }, `--listen "localhost"`},
		{"negative parallelism", func(o *Options) { o.Parallelism = -1 }, "parallelism -1 is negative"},
		{"a resource name without a domain", func(o *Options) { o.Names.ResourceName = "gpu-mem" }, `--domain, --resource-name, --whole-resource-name (names in a --config file): invalid gpushare names: resource name "gpu-mem": it has no domain prefix`},
		{"negative best-node cap", func(o *Options) { o.MaxBestNodes = -1 }, "maxBestNodes -1 is negative"},
		{"GC target out of range", func(o *Options) { o.GCPercent = 20000 }, "gcPercent 20000 is not between 0 (Go's default) and 10000; the default is 400"},
		{"admin address without port", func(o *Options) { o.AdminListenAddress = "0.0.0.0" }, `--admin-listen "0.0.0.0"`},
		{"missing kubeconfig", func(o *Options) { o.Kubeconfig = "/nonexistent/kubeconfig" }, "--kubeconfig: stat /nonexistent/kubeconfig"},
		{"negative resync", func(o *Options) { o.ResyncPeriod = -time.Second }, "resyncPeriod -1s is negative"},
		{"zero QPS", func(o *Options) { o.KubeAPIQPS = 0 }, "kubeAPIQPS 0 and kubeAPIBurst 400 must be positive"},
		{"bind timeout with no time to queue", func(o *Options) { o.BindTimeout = time.Second }, "bindTimeout 1s leaves no time to wait for the API request budget"},
		{"a certificate without its key", func(o *Options) { o.TLSCertFile = "/etc/tls/tls.crt" }, "--tls-cert-file and --tls-private-key-file go together"},
		{"a client CA without HTTPS", func(o *Options) { o.ClientCAFile = "/etc/tls/ca.crt" }, "--client-ca-file needs --tls-cert-file and --tls-private-key-file"},
		{"a body limit too small for a pod", func(o *Options) { o.MaxRequestBytes = 1024 }, "maxRequestBytes 1024 is below 64 KiB"},
		{"a memory limit over the container's", func(o *Options) { o.GoMemoryLimitFraction = 1.5 }, "goMemoryLimitFraction 1.5 is not between 0 (no limit) and 1"},
		{"device plugin selector that does not parse", func(o *Options) { o.DevicePluginSelector = "app in (" }, `devicePluginSelector "app in (": `},
		{"device plugin selector that selects every pod", func(o *Options) { o.DevicePluginSelector = " " }, `selects every pod: name the device plugin's labels`},
		{"node-scope users without the webhook", func(o *Options) { o.NodeScope.Users = []string{"u"} }, "nodeScope.users and --node-scope-tls-* need --node-scope-listen"},
		{"node-scope webhook without users", func(o *Options) {
			o.NodeScope = NodeScopeOptions{Listen: ":39997", TLSCertFile: "c", TLSPrivateKeyFile: "k"}
		}, "--node-scope-listen needs nodeScope.users"},
		{"node-scope webhook over HTTP", func(o *Options) { o.NodeScope = NodeScopeOptions{Listen: ":39997", Users: []string{"u"}} }, "--node-scope-listen needs --node-scope-tls-cert-file and --node-scope-tls-private-key-file"},
		{"node-scope user that is not a service account name", func(o *Options) {
			o.NodeScope = NodeScopeOptions{Listen: ":39997", Users: []string{"system:serviceaccount:plugin"}, TLSCertFile: "c", TLSPrivateKeyFile: "k"}
		}, `nodeScope.users entry "system:serviceaccount:plugin" is not a username`},
		{"card limits without a namespace", func(o *Options) { o.CardLimitsConfigMap = "gpushare-card-limits" }, `cardLimitsConfigMap "gpushare-card-limits": want namespace/name, e.g. gpushare-system/gpushare-card-limits`},
		{"the plugins' public key as the extender's", func(o *Options) { o.RecordKeyDir = publicKeyDir(t) }, "holds a public key: the extender needs the private key"},
		{"public keys published without keys", func(o *Options) { o.RecordPublicKeyConfigMap = "ns/pub" }, "recordPublicKeyConfigMap needs --record-key-dir"},
		{"public-key ConfigMap without a namespace", func(o *Options) { o.RecordPublicKeyConfigMap = "pub" }, `recordPublicKeyConfigMap "pub": want namespace/name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mod(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if d := DefaultOptions(); d.Validate() != nil {
		err := d.Validate()
		t.Errorf("defaults: %v", err)
	}
}

// TestServeOnRandomPort wires the real server (informers over a fake
// clientset, gin, metrics) on a random port and drives it over HTTP as
// kube-scheduler would: readyz, filter, prioritize, bind; then the informer
// confirms the bound pod.
func TestServeOnRandomPort(t *testing.T) {
	pod := podtest.Make("ns", "p").GPU("main", 10).Obj()
	client := fake.NewClientset(
		fixture.MakeNode("n1").Card(0, 40).Obj(),
		fixture.MakeNode("n2").Card(0, 40).Obj(),
		podtest.Make("ns", "resident").GPU("main", 20).AssignOn("n2", api.PhaseAllocated, 0).Obj(),
		pod,
	)
	fixture.ServeBindings(client, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := DefaultOptions()
	o.Policy = "binpack" // the answers below are binpack's: the fuller node
	go func() { done <- Serve(ctx, o, Clients{Read: client}, ln, admin) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(path string, in, out any) {
		t.Helper()
		b, _ := json.Marshal(in)
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("readyz", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz %d", code)
	}

	nodes := []string{"n1", "n2"}
	var fr extenderv1.ExtenderFilterResult
	post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &fr)
	if fr.NodeNames == nil || !cmp.Equal(*fr.NodeNames, []string{"n2"}) {
		t.Errorf("filter kept %v, want [n2] (binpack: the fuller node)", fr.NodeNames)
	}
	var pr extenderv1.HostPriorityList
	post("/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &pr)
	if diff := cmp.Diff(extenderv1.HostPriorityList{{Host: "n1", Score: 0}, {Host: "n2", Score: 10}}, pr); diff != "" {
		t.Errorf("prioritize (-want +got):\n%s", diff)
	}
	var br extenderv1.ExtenderBindingResult
	post("/bind", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: pod.UID, Node: "n2"}, &br)
	if br.Error != "" {
		t.Fatalf("bind: %s", br.Error)
	}
	got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := api.DefaultNames().AssignmentFromPod(got); err != nil || a.Node != "n2" {
		t.Fatalf("assignment after bind: %+v, %v", a, err)
	}
	// The informer sees the bound pod: /inspect shows it confirmed.
	poll("confirmation", func() bool {
		_, body := get("/inspect/n2")
		return strings.Contains(body, `"name":"p","uid":"uid-ns-p","container":"main","units":10,"state":"confirmed"`)
	})
	if _, body := get("/metrics"); !strings.Contains(body, `gpushare_card_used_units{card="0",node="n2",uuid="GPU-n2-0"} 30`) {
		t.Errorf("metrics lack n2's used units:\n%s", body)
	}

	// The admin address answers probes to anyone, metrics and inspect only
	// with a token (--admin-auth=delegated, the default), and refuses the verbs.
	adminBase := "http://" + admin.Addr().String()
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusUnauthorized, "/inspect/n2": http.StatusUnauthorized} {
		resp, err := http.Get(adminBase + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("admin GET %s without a token: %s, want %d", path, resp.Status, want)
		}
	}
	for _, path := range []string{"/filter", "/prioritize", "/bind"} {
		resp, err := http.Post(adminBase+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("admin POST %s without a token: %s %s, want 401 (with a token: 404, the verbs are not served there)", path, resp.Status, b)
		}
	}
}

// With --card-limits-configmap the extender keeps the ConfigMap at the
// largest card, and follows a node joining without waiting for a resync.
func TestServePublishesTheLargestCardForAdmission(t *testing.T) {
	client := fake.NewClientset(
		fixture.MakeNode("n1").Card(0, 40).Card(1, 24).Obj(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpushare-system", Name: api.CardLimitsConfigMap}},
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := DefaultOptions()
	o.CardLimitsConfigMap = "gpushare-system/" + api.CardLimitsConfigMap
	go func() { done <- Serve(ctx, o, Clients{Read: client}, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitFor := func(units string) {
		t.Helper()
		var last map[string]string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := client.CoreV1().ConfigMaps("gpushare-system").Get(ctx, api.CardLimitsConfigMap, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = cm.Data
			return cm.Data[api.CardLimitsKeyMaxUnits] == units, nil
		})
		if err != nil {
			t.Fatalf("waiting for maxUnitsPerCard %s: %v (data %v)", units, err, last)
		}
	}
	waitFor("40")
	if _, err := client.CoreV1().Nodes().Create(ctx, fixture.MakeNode("n2").Card(0, 80).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("80")
}

func TestRunFailsOnBadOptions(t *testing.T) {
	o := DefaultOptions()
	o.Policy = "nope"
	err := Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "known policies are") {
		t.Errorf("Run with a bad policy: %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o = DefaultOptions()
	o.ListenAddress = "127.0.0.1:0"
	err = Run(context.Background(), o) // no kubeconfig, not in a cluster
	if err == nil || !strings.Contains(err.Error(), "set --kubeconfig") {
		t.Errorf("Run outside a cluster: %v", err)
	}
}

// The extender sets Go's soft memory limit to a fraction of its cgroup's
// limit, unless GOMEMLIMIT is set (the runtime read it) or there is none.
// TestSetGCPercentUnlessGOGCIsSet: the binary collects at the chart's
// target (400) without the chart, and GOGC, when set, wins.
func TestSetGCPercentUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	noEnv := func(string) (string, bool) { return "", false }
	if got := setGCPercent(DefaultOptions().GCPercent, noEnv); got != 400 || debug.SetGCPercent(100) != 400 {
		t.Errorf("default: set %d; want the runtime's target at 400", got)
	}
	gogc := func(k string) (string, bool) { return "150", k == "GOGC" }
	if got := setGCPercent(400, gogc); got != 0 || debug.SetGCPercent(100) != 100 {
		t.Errorf("GOGC set: set %d; want the runtime's target left as GOGC made it", got)
	}
	if got := setGCPercent(0, noEnv); got != 0 || debug.SetGCPercent(100) != 100 {
		t.Errorf("--gc-percent 0: set %d; want Go's default left", got)
	}
}

func TestSetMemoryLimitFromTheCgroup(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cgroup := func(limit string) memlimit.ReadFile {
		return func(name string) ([]byte, error) {
			switch name {
			case "/proc/self/cgroup":
				return []byte("0::/\n"), nil
			case "/sys/fs/cgroup/memory.max":
				return []byte(limit + "\n"), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	noEnv := func(string) (string, bool) { return "", false }
	if got := setMemoryLimit(0.9, noEnv, cgroup("1073741824")); got != 966367641 || debug.SetMemoryLimit(-1) != 966367641 {
		t.Errorf("1 GiB cgroup: set %d, runtime limit %d; want 90%% of it, 966367641", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(before)
	for name, tc := range map[string]struct {
		env    func(string) (string, bool)
		cgroup memlimit.ReadFile
	}{
		"GOMEMLIMIT set": {func(k string) (string, bool) { return "700MiB", k == "GOMEMLIMIT" }, cgroup("1073741824")},
		"no limit":       {noEnv, cgroup("max")},
		"unreadable":     {noEnv, cgroup("lots")},
	} {
		if got := setMemoryLimit(0.9, tc.env, tc.cgroup); got != 0 || debug.SetMemoryLimit(-1) != before {
			t.Errorf("%s: set %d, runtime limit %d; want none set", name, got, debug.SetMemoryLimit(-1))
		}
	}
}

// publicKeyDir is a key directory as the device plugins get it: a public key
// only.
func publicKeyDir(t *testing.T) string {
	dir := t.TempDir()
	pub := podtest.RecordKeys("extender").Current
	if err := os.WriteFile(filepath.Join(dir, api.RecordKeyCurrent), []byte(api.NodeKeyAnnotation(pub)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
