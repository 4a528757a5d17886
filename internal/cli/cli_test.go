package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

type settings struct {
	name  string
	wait  time.Duration
	count int
}

func flags(s *settings) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&s.name, "name", "default", "a name")
	fs.DurationVar(&s.wait, "wait", time.Second, "a wait")
	fs.IntVar(&s.count, "count", 1, "a count")
	fs.Bool("local", false, "no variable")
	BindEnv(fs, func(f string) string {
		if f == "local" {
			return ""
		}
		return "T_" + strings.ToUpper(f)
	})
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestApplyEnvFlagWinsOverVariableWinsOverDefault(t *testing.T) {
	var s settings
	fs := flags(&s)
	if err := fs.Parse([]string{"--count=3"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyEnv(fs, env(map[string]string{"T_NAME": "", "T_WAIT": "5s", "T_COUNT": "7", "T_LOCAL": "true"})); err != nil {
		t.Fatal(err)
	}
	want := settings{name: "", wait: 5 * time.Second, count: 3}
	if s != want {
		t.Errorf("got %+v, want %+v (flag over variable over default; an empty variable is a value)", s, want)
	}
	if l, _ := fs.GetBool("local"); l {
		t.Error("a flag without a variable was set from the environment")
	}
}

func TestApplyEnvNamesEveryBadVariable(t *testing.T) {
	var s settings
	fs := flags(&s)
	err := ApplyEnv(fs, env(map[string]string{"T_WAIT": "soon", "T_COUNT": "many"}))
	if !errors.Is(err, ErrUsage) || ExitCode(err) != ExitUsage {
		t.Fatalf("err = %v, want a usage error", err)
	}
	for _, want := range []string{`environment variable T_WAIT="soon" (flag --wait)`, `environment variable T_COUNT="many" (flag --count)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
}

func TestBindEnvNamesTheVariableInTheUsageOnce(t *testing.T) {
	var s settings
	fs := flags(&s)
	BindEnv(fs, func(f string) string { return "OTHER_" + f })
	if got := fs.Lookup("wait").Usage; got != "a wait (env T_WAIT)" {
		t.Errorf("usage %q", got)
	}
	if got := fs.Lookup("local").Usage; got != "no variable (env OTHER_local)" {
		t.Errorf("usage of a flag first bound later: %q", got)
	}
	if !strings.Contains(fs.FlagUsages(), "(env T_COUNT)") {
		t.Errorf("help:\n%s", fs.FlagUsages())
	}
}

func TestExitCode(t *testing.T) {
	inner := errors.New("no such policy")
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{inner, ExitError},
		{Usage(inner), ExitUsage},
		{Usagef("bad: %w", inner), ExitUsage},
		{Usage(nil), ExitOK},
	}
	for _, tc := range tests {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if u := Usage(inner); !errors.Is(u, inner) || u.Error() != inner.Error() {
		t.Errorf("Usage(err) = %v: must read as err and wrap it", u)
	}
}

func TestCommandAppliesTheEnvironmentBeforeRunAndRefusesArguments(t *testing.T) {
	var s settings
	var got settings
	runs := 0
	newCmd := func() *cobra.Command {
		cmd := Command("prog", "short", "Long text.", env(map[string]string{"T_NAME": "from-env"}), func(*cobra.Command) error {
			runs++
			got = s
			return nil
		})
		cmd.Flags().AddFlagSet(flags(&s))
		return cmd
	}
	cmd := newCmd()
	cmd.SetArgs([]string{"--count=3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.name != "from-env" || got.count != 3 || runs != 1 {
		t.Errorf("run saw %+v after %d runs, want the variable's name and the flag's count once", got, runs)
	}
	if !strings.HasPrefix(cmd.Long, "Long text.\n\nEvery flag can also be set by the environment variable") {
		t.Errorf("Long = %q, want the text then the environment paragraph", cmd.Long)
	}
	cmd = newCmd()
	cmd.SetArgs([]string{"extra"})
	if err := cmd.Execute(); !errors.Is(err, ErrUsage) || runs != 1 {
		t.Errorf("an argument: err = %v after %d runs, want a usage error and no run", err, runs)
	}
	cmd = newCmd()
	cmd.SetArgs([]string{"--nope"})
	if err := cmd.Execute(); !errors.Is(err, ErrUsage) || runs != 1 {
		t.Errorf("an unknown flag: err = %v after %d runs, want a usage error and no run", err, runs)
	}
}
