package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/internal/cli"
)

func TestAllowedPoliciesFromFlagAndEnvironment(t *testing.T) {
	o, err := parse(t, nil, map[string]string{"GPUSHARE_ALLOWED_POLICIES": "spread,frag"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"spread", "frag"}, o.AllowedPolicies); diff != "" {
		t.Errorf("allowed policies from the environment (-want +got):\n%s", diff)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	if o, err = parse(t, []string{"--allowed-policies=bestfit"}, map[string]string{"GPUSHARE_ALLOWED_POLICIES": "spread"}); err != nil || !cmp.Equal([]string{"bestfit"}, o.AllowedPolicies) {
		t.Errorf("the flag must win: %v %v", o.AllowedPolicies, err)
	}
	if d := DefaultOptions(); len(d.AllowedPolicies) != 0 {
		t.Errorf("default allowed policies %v, want none besides --policy", d.AllowedPolicies)
	}
	for _, tc := range []struct{ value, want string }{
		{"spread,tetris", `allowedPolicies: unknown policy "tetris": known policies are bestfit, binpack, fgd, frag, spread`},
		{"spread,,frag", `allowedPolicies "spread,,frag" has an empty entry: list policy names separated by one comma, e.g. binpack,spread`},
	} {
		o, err := parse(t, []string{"--allowed-policies=" + tc.value}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, cli.ErrUsage) {
			t.Errorf("--allowed-policies=%s: err = %v, want a usage error containing %q", tc.value, err, tc.want)
		}
	}
}
