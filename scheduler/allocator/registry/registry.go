// Package registry names gpushare's placement policies: the configured name
// (--policy, --allowed-policies, a pod's policy annotation) to the policy.
// The policies themselves live beside the decision core they share, as
// Kubernetes' noderesources strategies do: binpack, spread and bestfit in
// package allocator, the fragmentation-aware fgd and frag in package frag.
// This package imports both; neither imports it.
package registry

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpushare/gpushare/scheduler/allocator"
	"github.com/gpushare/gpushare/scheduler/allocator/frag"
)

// Default is the policy used when none is configured: frag, the best
// packer of the five on the traces (docs/packing.md), within the per-call
// cost target (docs/design.md, "Scheduling throughput").
const Default = "frag"

// policies maps a configured name to the constructor of its policy (the
// policy's Name is that name). A new policy is one entry here plus its
// constructor.
var policies = map[string]func() *allocator.Policy{
	"binpack": allocator.NewBinpack,
	"spread":  allocator.NewSpread,
	"bestfit": allocator.NewBestFit,
	"frag":    frag.New,
	"fgd":     frag.NewFGD,
}

// Names lists the known policies, sorted.
func Names() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns a new value of the policy registered under name. An
// unknown name is an error that lists the known ones, so a bad --policy
// fails at start.
func Lookup(name string) (*allocator.Policy, error) {
	newPolicy, ok := policies[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q: known policies are %s", name, strings.Join(Names(), ", "))
	}
	return newPolicy(), nil
}
