package app

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	cmd := newCommand(&Options{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, func(_ context.Context, o Options) error {
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
		{"bad value from the environment", nil, map[string]string{"NODE_NAME": "n", "GPUSHARE_DEVICE_LIST_STRATEGY": "cdi"}, `--device-list-strategy: unknown device list strategy "cdi"`},
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

func TestCommandHelpNamesEveryVariable(t *testing.T) {
	cmd := newCommand(&Options{}, nil, nil)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
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
