package app

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/spf13/pflag"

	"github.com/gpushare/gpushare/internal/cli"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // main sets release mode; tests want no route dump either
	os.Exit(m.Run())
}

func TestFlagWinsOverEnvironmentWinsOverDefault(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(Options) any
		is   any
	}{
		{"default when neither is given", nil, nil, func(o Options) any { return o.Policy }, "frag"},
		{"environment over the default", nil, map[string]string{"GPUSHARE_POLICY": "spread"}, func(o Options) any { return o.Policy }, "spread"},
		{"flag over the environment", []string{"--policy=bestfit"}, map[string]string{"GPUSHARE_POLICY": "spread"}, func(o Options) any { return o.Policy }, "bestfit"},
		{"flag set to its default still wins", []string{"--kube-api-qps=200"}, map[string]string{"GPUSHARE_KUBE_API_QPS": "50"}, func(o Options) any { return o.KubeAPIQPS }, 200.0},
		{"duration from the environment", nil, map[string]string{"GPUSHARE_RESYNC_PERIOD": "90s"}, func(o Options) any { return o.ResyncPeriod }, 90 * time.Second},
		{"empty variable gives the empty value", nil, map[string]string{"GPUSHARE_ADMIN_LISTEN": ""}, func(o Options) any { return o.AdminListenAddress }, ""},
		{"other programs' variables are ignored", nil, map[string]string{"GPUSHARE_APISERVER_PORT": "1", "NODE_NAME": "n"}, func(o Options) any { return o.ListenAddress }, ":39999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.want(o); got != tc.is {
				t.Errorf("got %v, want %v", got, tc.is)
			}
		})
	}
}

func TestBadEnvironmentIsAUsageErrorNamingTheVariable(t *testing.T) {
	_, err := parse(t, nil, map[string]string{"GPUSHARE_KUBE_API_QPS": "fast", "GPUSHARE_PARALLELISM": "four"})
	if !errors.Is(err, cli.ErrUsage) || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("err = %v, want a usage error (exit status 2)", err)
	}
	for _, want := range []string{`environment variable GPUSHARE_KUBE_API_QPS="fast" (flag --kube-api-qps)`, `environment variable GPUSHARE_PARALLELISM="four" (flag --parallelism)`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
	// A bad variable is ignored when the flag is given: the flag wins.
	if _, err := parse(t, []string{"--kube-api-qps=10"}, map[string]string{"GPUSHARE_KUBE_API_QPS": "fast"}); err != nil {
		t.Errorf("flag given, bad variable: %v", err)
	}
}

func TestCommandLineMistakesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--polciy=spread"}, {"extra"}, {"-policy=spread"}} {
		if _, err := parse(t, args, nil); cli.ExitCode(err) != cli.ExitUsage {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
	o := DefaultOptions()
	o.Policy = "tetris"
	if err := o.Validate(); cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("invalid options: err = %v, want a usage error", err)
	}
}

func TestHelpNamesEveryVariable(t *testing.T) {
	o := DefaultOptions()
	cmd := newCommand(&o, nil, nil)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	n := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		n++
		if env := EnvName(f.Name); !strings.Contains(out.String(), "(env "+env+")") {
			t.Errorf("--help does not name %s for --%s", env, f.Name)
		}
	})
	if n < 10 || !strings.Contains(out.String(), "--config string") || strings.Contains(out.String(), "--policy") || !strings.Contains(out.String(), "(env GPUSHARE_V)") {
		t.Errorf("--help:\n%s", out.String())
	}
}

func TestConfigFileSetsFieldsAndRefusesUnknownOnes(t *testing.T) {
	file := func(body string) string {
		p := t.TempDir() + "/config.yaml"
		if err := os.WriteFile(p, []byte("apiVersion: gpushare.example.com/v1alpha1\nkind: SchedulerConfiguration\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return "--config=" + p
	}
	o, err := parse(t, []string{file("policy: spread\nallowedPolicies: [binpack]\nbindTimeout: 8s\nnodeScope:\n  users: [u]\n")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Policy != "spread" || len(o.AllowedPolicies) != 1 || o.BindTimeout != 8*time.Second || o.NodeScope.Users[0] != "u" || o.FilterMode != "best" {
		t.Errorf("options from the file = %+v", o)
	}
	if o, err = parse(t, []string{file("policy: spread\n"), "--policy=binpack"}, nil); err != nil || o.Policy != "binpack" {
		t.Errorf("a deprecated flag over the file: policy %q, err %v", o.Policy, err)
	}
	for body, want := range map[string]string{
		"polcy: spread\n":      `unknown field "polcy"`,
		"bindTimeout: 8\n":     "bindTimeout: 8 is not a duration",
		"maxBestNodes: many\n": "cannot unmarshal string",
	} {
		if _, err := parse(t, []string{file(body)}, nil); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%q: err = %v, want a usage error saying %q", body, err, want)
		}
	}
	own, klog := 0, pflag.NewFlagSet("klog", pflag.ContinueOnError)
	cli.AddKlogFlags(klog)
	cmd := newCommand(&o, nil, nil)
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && klog.Lookup(f.Name) == nil {
			own++
		}
	})
	if own > 15 {
		t.Errorf("%d own flags, want at most 15 (the rest belong in the configuration file)", own)
	}
}
