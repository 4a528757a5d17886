package cli

import (
	"cmp"
	"fmt"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// The flags that set an installation's names (api.Names), the same three in
// every program; the chart passes them from its values names.domain,
// names.resourceName and names.wholeResourceName.
const (
	FlagDomain            = "domain"
	FlagResourceName      = "resource-name"
	FlagWholeResourceName = "whole-resource-name"
)

// NameFlags are the values of the name flags, and the names section of a configuration file.
type NameFlags struct {
	// Domain of every gpushare annotation and label key (<domain>/inventory,
	// <domain>/assignment, ...); the same in every gpushare program of the cluster.
	Domain string `json:"domain"`
	// ResourceName is the extended resource of GPU memory on one card, as pods ask for it
	// (aliyun.com/gpu-mem: Alibaba's gpushare pods run unchanged, docs/migration.md).
	ResourceName string `json:"resourceName"`
	// WholeResourceName is the extended resource of whole GPU cards.
	WholeResourceName string `json:"wholeResourceName"`
}

// DefaultNameFlags are the defaults (api.DefaultNames).
func DefaultNameFlags() NameFlags {
	return NameFlags{Domain: api.DefaultDomain, ResourceName: string(api.DefaultResourceName), WholeResourceName: string(api.DefaultWholeResourceName)}
}

// AddFlags defines the three name flags on fs with f's values as defaults.
func (f *NameFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Domain, FlagDomain, f.Domain, "domain of every gpushare annotation and label key (<domain>/inventory, <domain>/assignment, <domain>/isolate, ...); the same in every gpushare program of the cluster")
	fs.StringVar(&f.ResourceName, FlagResourceName, f.ResourceName, "extended resource of GPU memory on one card, as pods ask for it in their limits ("+string(api.AlibabaResourceName)+": Alibaba's gpushare pods run unchanged, docs/migration.md); the same in every gpushare program")
	fs.StringVar(&f.WholeResourceName, FlagWholeResourceName, f.WholeResourceName, "extended resource of whole GPU cards, as pods ask for it in their limits; the same in every gpushare program")
}

// Names checks the flags' values (api.NewNames); the error is a usage error
// naming the flags to change. An empty value is the default's (so is the
// zero NameFlags).
func (f NameFlags) Names() (api.Names, error) {
	d := DefaultNameFlags()
	f.Domain = cmp.Or(f.Domain, d.Domain)
	f.ResourceName = cmp.Or(f.ResourceName, d.ResourceName)
	f.WholeResourceName = cmp.Or(f.WholeResourceName, d.WholeResourceName)
	n, err := api.NewNames(f.Domain, corev1.ResourceName(f.ResourceName), corev1.ResourceName(f.WholeResourceName))
	if err != nil {
		return api.Names{}, Usage(fmt.Errorf("--%s, --%s, --%s (names in a --%s file): %w", FlagDomain, FlagResourceName, FlagWholeResourceName, FlagConfig, err))
	}
	return n, nil
}
