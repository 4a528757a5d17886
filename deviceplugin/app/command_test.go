package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpushare/gpushare/internal/cli"
)

// execute runs the program's command on args with env as the environment
// and returns the options Run would have been given.
func execute(t *testing.T, args []string, env map[string]string) (Options, error) {
	t.Helper()
	var got Options
	d := DefaultOptions()
	cmd := newCommand(&d, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, func(_ context.Context, o Options) error {
		got = o
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return got, cmd.Execute()
}

func TestCommandFlagWinsOverEnvironmentWinsOverDefault(t *testing.T) {
	node := map[string]string{"NODE_NAME": "n1"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"NODE_NAME": "n1"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		get  func(Options) any
		want any
	}{
		{"default when neither is given", nil, node, func(o Options) any { return o.MemoryUnit }, "GiB"},
		{"environment over the default", nil, with("GPUSHARE_MEMORY_UNIT", "MiB"), func(o Options) any { return o.MemoryUnit }, "MiB"},
		{"flag over the environment", []string{"--memory-unit=GiB"}, with("GPUSHARE_MEMORY_UNIT", "MiB"), func(o Options) any { return o.MemoryUnit }, "GiB"},
		{"NODE_NAME sets --node-name", nil, node, func(o Options) any { return o.NodeName }, "n1"},
		{"--node-name over NODE_NAME", []string{"--node-name=n2"}, node, func(o Options) any { return o.NodeName }, "n2"},
		{"KUBECONFIG sets --kubeconfig", nil, with("KUBECONFIG", "/etc/k"), func(o Options) any { return o.Kubeconfig }, "/etc/k"},
		{"bool from the environment", nil, with("GPUSHARE_FAIL_ON_INIT_ERROR", "false"), func(o Options) any { return o.FailOnInitError }, false},
		{"duration from the environment", nil, with("GPUSHARE_ALLOCATE_WAIT", "3s"), func(o Options) any { return o.AllocateWait }, 3 * time.Second},
		{"an empty variable turns PodResources off", nil, with("GPUSHARE_POD_RESOURCES_SOCKET", ""), func(o Options) any { return o.PodResourcesSocket }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := execute(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(o); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCommandRefusesBadInputAsUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad bool variable", nil, map[string]string{"NODE_NAME": "n", "GPUSHARE_HEALTH_CHECKS": "maybe"}, `environment variable GPUSHARE_HEALTH_CHECKS="maybe" (flag --health-checks)`},
		{"bad duration variable", nil, map[string]string{"NODE_NAME": "n", "GPUSHARE_RECONCILE_INTERVAL": "often"}, `environment variable GPUSHARE_RECONCILE_INTERVAL="often" (flag --reconcile-interval)`},
		{"no node name, before any client is built", nil, nil, "set NODE_NAME from the downward API"},
		{"bad value from the environment", nil, map[string]string{"NODE_NAME": "n", "GPUSHARE_DEVICE_LIST_STRATEGY": "cdi"}, `deviceListStrategy: unknown device list strategy "cdi"`},
		{"unknown field in the configuration file", []string{"--config=" + configFile(t, "memory:\n  enforcment: kill\n")}, map[string]string{"NODE_NAME": "n"}, `unknown field "enforcment"`},
		{"another program's kind", []string{"--config=" + writeFile(t, "apiVersion: gpushare.example.com/v1alpha1\nkind: SchedulerConfiguration\n")}, map[string]string{"NODE_NAME": "n"}, "want apiVersion: gpushare.example.com/v1alpha1 and kind: DevicePluginConfiguration"},
		{"a duration without its unit", []string{"--config=" + configFile(t, "memory:\n  grace: 30\n")}, map[string]string{"NODE_NAME": "n"}, "memory.grace: 30 is not a duration"},
		{"a bad value in the file names its field", []string{"--config=" + configFile(t, "memory:\n  enforcement: delete\n")}, map[string]string{"NODE_NAME": "n"}, "memory.enforcement: "},
		{"unknown flag", []string{"--nvml-source=real"}, map[string]string{"NODE_NAME": "n"}, "unknown flag: --nvml-source (see --help)"},
		{"an argument", []string{"real"}, map[string]string{"NODE_NAME": "n"}, `unexpected argument "real"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := execute(t, tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if !errors.Is(err, cli.ErrUsage) {
				t.Errorf("err = %v is not a usage error (exit status 2)", err)
			}
		})
	}
	if _, err := execute(t, nil, nil); !errors.Is(err, ErrNoNodeName) {
		t.Errorf("err = %v, want ErrNoNodeName", err)
	}
}

// configFile writes a DevicePluginConfiguration with body's fields.
func configFile(t *testing.T, body string) string {
	return writeFile(t, "apiVersion: gpushare.example.com/v1alpha1\nkind: DevicePluginConfiguration\n"+body)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFileSetsFieldsADeprecatedFlagOrVariableWins(t *testing.T) {
	cfg := configFile(t, "memoryUnit: MiB\nnames:\n  domain: gpu.corp.example\nmemory:\n  grace: 1m\n  enforcement: report\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(Options) bool
	}{
		{"the file's fields over the defaults, the rest defaulted", []string{"--config=" + cfg}, nil, func(o Options) bool {
			return o.MemoryUnit == "MiB" && o.Names.Domain == "gpu.corp.example" && o.Names.ResourceName == "example.com/gpu-mem" &&
				o.Memory.Grace == time.Minute && o.Memory.Enforcement == "report" && o.Memory.Tolerance == "5%"
		}},
		{"a deprecated flag over the file", []string{"--config=" + cfg, "--memory-grace=2m", "--domain=other.example"}, nil, func(o Options) bool {
			return o.Memory.Grace == 2*time.Minute && o.Names.Domain == "other.example" && o.MemoryUnit == "MiB"
		}},
		{"a deprecated variable over the file", []string{"--config=" + cfg}, map[string]string{"GPUSHARE_MEMORY_UNIT": "GiB"}, func(o Options) bool {
			return o.MemoryUnit == "GiB" && o.Memory.Enforcement == "report"
		}},
		{"deprecated flags without a file, as before", []string{"--memory-unit=MiB", "--health-checks=false", "--mps"}, nil, func(o Options) bool {
			return o.MemoryUnit == "MiB" && !o.HealthChecks && o.Memory.MPS
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"NODE_NAME": "n"}
			for k, v := range tc.env {
				env[k] = v
			}
			o, err := execute(t, tc.args, env)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(o) {
				t.Errorf("options = %+v", o)
			}
		})
	}
}

func TestCommandHasFewFlagsEachDeprecatedOneNamesItsField(t *testing.T) {
	d := DefaultOptions()
	cmd := newCommand(&d, nil, nil)
	own := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			if field := cli.AliasField(f); field == "" || !strings.Contains(f.Deprecated, field) {
				t.Errorf("hidden flag --%s names no configuration field: %q", f.Name, f.Deprecated)
			}
		} else if !klogFlag(f.Name) {
			own++
		}
	})
	if own > 15 {
		t.Errorf("%d own flags, want at most 15 (the rest belong in the configuration file)", own)
	}
}

// klogFlag says whether name is one of klog's flags (cli.AddKlogFlags).
func klogFlag(name string) bool {
	fs := pflag.NewFlagSet("klog", pflag.ContinueOnError)
	cli.AddKlogFlags(fs)
	return fs.Lookup(name) != nil
}

func TestCommandHelpNamesEveryVariable(t *testing.T) {
	d := DefaultOptions()
	cmd := newCommand(&d, nil, nil)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		if env := EnvName(f.Name); !strings.Contains(out.String(), "(env "+env+")") {
			t.Errorf("--help does not name %s for --%s", env, f.Name)
		}
	})
	for _, want := range []string{"(env NODE_NAME)", "(env KUBECONFIG)", "(env GPUSHARE_NVML)", "(env GPUSHARE_V)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %s:\n%s", want, out.String())
		}
	}
}
