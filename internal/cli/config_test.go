package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type testConfig struct {
	metav1.TypeMeta `json:",inline"`
	Path            string        `json:"-"`
	Names           []string      `json:"names"`
	Wait            time.Duration `json:"wait"`
	Nested          struct {
		Enabled bool `json:"enabled"`
	} `json:"nested"`
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: gpushare.example.com/v1alpha1\nkind: Test\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigDeprecatedFlagsWinAndReplaceLists(t *testing.T) {
	file := writeConfig(t, "names: [a, b]\nwait: 1m\nnested: {enabled: true}\n")
	tests := []struct {
		name string
		args []string
		want testConfig
	}{
		{"the file over the defaults", nil, testConfig{Names: []string{"a", "b"}, Wait: time.Minute}},
		{"a list flag replaces the file's list, repeated flags add up", []string{"--names=c", "--names=d,e"}, testConfig{Names: []string{"c", "d", "e"}, Wait: time.Minute}},
		{"a duration and a bool flag over the file", []string{"--wait=2s", "--on=false"}, testConfig{Names: []string{"a", "b"}, Wait: 2 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig{Wait: time.Second}
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			Aliases(fs, &c, []Alias{{"names", "names"}, {"wait", "wait"}, {"on", "nested.enabled"}})
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := LoadConfig(fs, file, "Test", &c); err != nil {
				t.Fatal(err)
			}
			tc.want.Nested.Enabled = !strings.Contains(strings.Join(tc.args, " "), "--on=false")
			c.TypeMeta = metav1.TypeMeta{}
			if diff := cmp.Diff(tc.want, c); diff != "" {
				t.Errorf("configuration (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandWarnsOfADeprecatedVariable(t *testing.T) {
	var c testConfig
	var errOut bytes.Buffer
	cmd := Command("t", "", "", func(k string) (string, bool) { return "5s", k == "T_WAIT" }, func(*cobra.Command) error { return nil })
	Aliases(cmd.Flags(), &c, []Alias{{"wait", "wait"}})
	BindEnv(cmd.Flags(), func(f string) string { return "T_" + strings.ToUpper(f) })
	cmd.SetErr(&errOut)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if c.Wait != 5*time.Second || !strings.Contains(errOut.String(), "T_WAIT has been deprecated, set wait in the --config file") {
		t.Errorf("wait %v, stderr %q: want 5s and a warning naming the field", c.Wait, errOut.String())
	}
}
