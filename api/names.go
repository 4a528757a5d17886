package api

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The default names. An operator sets others once, in the chart (values
// names.domain, names.resourceName, names.wholeResourceName), which passes
// them to every program (--domain, --resource-name, --whole-resource-name);
// NewNames checks them and derives every key from them.
const (
	// DefaultDomain is the domain of every annotation and label key.
	DefaultDomain = "gpushare.example.com"
	// DefaultResourceName is the extended resource a container asks for as
	// memory units on ONE card (GiB unless the node's inventory declares
	// another unit).
	DefaultResourceName corev1.ResourceName = "example.com/gpu-mem"
	// DefaultWholeResourceName is the extended resource a container asks for
	// as whole cards (see WholeCardRequest).
	DefaultWholeResourceName corev1.ResourceName = "example.com/gpu"
	// AlibabaResourceName is the resource name of Alibaba's gpushare
	// (AliyunContainerService/gpushare-device-plugin). With it as the
	// memory resource the programs run in compatibility mode: pods written
	// for Alibaba's gpushare run unchanged (docs/migration.md), and the
	// device plugin also sets the environment Alibaba's sets (AlibabaEnv).
	AlibabaResourceName corev1.ResourceName = "aliyun.com/gpu-mem"
)

// ErrInvalidNames is returned (wrapped) by NewNames for a name Kubernetes
// would refuse, or names that collide.
var ErrInvalidNames = errors.New("invalid gpushare names")

// Names are the resource names and the annotation and label keys one
// installation uses: the one place where every key is derived from the
// configured domain. Build it with NewNames (or DefaultNames); the zero value
// has no names and is not valid. Every program takes the same three settings
// and so derives the same keys.
type Names struct {
	domain   string
	resource corev1.ResourceName
	whole    corev1.ResourceName
}

// NewNames checks domain (e.g. "gpushare.example.com") and the two extended
// resource names (e.g. "example.com/gpu-mem", "example.com/gpu") and returns
// the Names they give. Every error says which name is wrong and what a valid
// one looks like.
func NewNames(domain string, resource, whole corev1.ResourceName) (Names, error) {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(domain); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("%w: domain %q: %s; give a DNS subdomain you own, e.g. %q", ErrInvalidNames, domain, strings.Join(msgs, "; "), DefaultDomain))
	}
	if err := checkResourceName("resource name", resource, DefaultResourceName); err != nil {
		errs = append(errs, err)
	}
	if err := checkResourceName("whole-card resource name", whole, DefaultWholeResourceName); err != nil {
		errs = append(errs, err)
	}
	if resource == whole && resource != "" {
		errs = append(errs, fmt.Errorf("%w: the resource name and the whole-card resource name are both %q: give them different names", ErrInvalidNames, resource))
	}
	if err := errors.Join(errs...); err != nil {
		return Names{}, err
	}
	return Names{domain: domain, resource: resource, whole: whole}, nil
}

// DefaultNames is NewNames of the defaults.
func DefaultNames() Names {
	return Names{domain: DefaultDomain, resource: DefaultResourceName, whole: DefaultWholeResourceName}
}

// OrDefault is n, or DefaultNames when n is the zero value (a component
// configured without names).
func (n Names) OrDefault() Names {
	if n.domain == "" {
		return DefaultNames()
	}
	return n
}

// checkResourceName applies Kubernetes' rules for an extended resource name:
// a qualified name with a domain prefix outside kubernetes.io, valid also
// with "requests." in front (the form a ResourceQuota uses).
func checkResourceName(what string, name, example corev1.ResourceName) error {
	s := string(name)
	prefix, _, ok := strings.Cut(s, "/")
	var problem string
	switch {
	case s == "":
		problem = "it is empty"
	case !ok:
		problem = "it has no domain prefix"
	case prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io"):
		problem = "the kubernetes.io domain is reserved for Kubernetes' own resources"
	default:
		if msgs := validation.IsQualifiedName("requests." + s); len(msgs) > 0 {
			problem = strings.Join(msgs, "; ")
		}
	}
	if problem == "" {
		return nil
	}
	return fmt.Errorf("%w: %s %q: %s; give an extended resource name of the form domain/name, e.g. %q", ErrInvalidNames, what, s, problem, example)
}

// The name parts of the keys (after "domain/") that are also said without
// the domain (CardChoice.String). Every name part is a valid label name, so
// a valid DNS subdomain makes every key valid.
const (
	keyCardModels        = "card-models"
	keyExcludeCardModels = "exclude-card-models"
	keyCardUUIDs         = "card-uuids"
)

// Domain is the domain of every annotation and label key, e.g.
// "gpushare.example.com".
func (n Names) Domain() string { return n.domain }

// key is the annotation or label key domain/name.
func (n Names) key(name string) string { return n.domain + "/" + name }

// ResourceName is the extended resource a container asks for, in its
// limits, as a whole number of memory units on ONE card.
func (n Names) ResourceName() corev1.ResourceName { return n.resource }

// WholeResourceName is the extended resource a container asks for as whole
// cards, given exclusively (see WholeCardRequest).
func (n Names) WholeResourceName() corev1.ResourceName { return n.whole }

// AnnotationInventory, on a Node, holds the Inventory the node's device
// plugin publishes (EncodeInventory).
func (n Names) AnnotationInventory() string { return n.key("inventory") }

// AnnotationAssignment, on a Pod, holds the Assignment the extender wrote at
// bind (EncodeAssignment).
func (n Names) AnnotationAssignment() string { return n.key("assignment") }

// AnnotationIsolation, on a Node, lists cards an operator has isolated:
// comma-separated card indexes and/or UUIDs, e.g. "1,GPU-5e1c…". See
// ParseIsolation.
func (n Names) AnnotationIsolation() string { return n.key("isolate") }

// AnnotationRecordKey, on a Node, is the public half of the key the node's
// device plugin signs its record corrections with (NodeKeyAnnotation). A
// node-signed record verifies only with the key its own node publishes.
func (n Names) AnnotationRecordKey() string { return n.key("record-key") }

// LabelGPUCount, on a Node, is the number of GPU cards the plugin found.
func (n Names) LabelGPUCount() string { return n.key("gpu-count") }

// LabelGPUModel, on a Node, is the model of its cards (SanitizeLabelValue
// applied); "mixed" when the cards differ.
func (n Names) LabelGPUModel() string { return n.key("gpu-model") }

// LabelGPUMemory, on a Node, is the memory of its largest card in the node's
// unit, followed by the unit, e.g. "80GiB".
func (n Names) LabelGPUMemory() string { return n.key("gpu-memory") }

// LabelDevicePlugin, on the device plugin's Events and Evictions about pods, names its node
// (SanitizeLabelValue): the chart's policy checks the pod of labelled ones, refuses the rest.
func (n Names) LabelDevicePlugin() string { return n.key("device-plugin") }

// AnnotationCardModels, on a Pod, lists the card models the pod may run on,
// separated by "|" (or ","): e.g. "H100|A100-80GB". A card is allowed when
// its model matches one entry (ModelPattern). Absent: any model.
func (n Names) AnnotationCardModels() string { return n.key(keyCardModels) }

// AnnotationExcludeCardModels, on a Pod, lists card models the pod must not
// run on, in the same form: e.g. "L4|T4". It wins over AnnotationCardModels.
func (n Names) AnnotationExcludeCardModels() string { return n.key(keyExcludeCardModels) }

// AnnotationCardUUIDs, on a Pod, lists the cards the pod may run on by NVML
// UUID (exactly as the inventory and `kubectl inspect gpushare` show them),
// separated by "," (or "|"): e.g. "GPU-1b6a…,GPU-77c0…". Absent: any card.
func (n Names) AnnotationCardUUIDs() string { return n.key(keyCardUUIDs) }

// LabelCardPinning, on a Namespace, is set to CardPinningAllowed by the
// cluster operator to let pods there pin cards by UUID
// (AnnotationCardUUIDs) where the chart's admission policy reserves that to
// labelled namespaces (cardChoice.uuidPinning).
func (n Names) LabelCardPinning() string { return n.key("card-pinning") }

// LabelPrivilegedPods, on a Namespace, is set to CardPinningAllowed
// ("allowed") by the cluster operator to let pods there run privileged
// containers, which see every GPU of their node, where the chart's admission
// policy refuses them (admission.privilegedPods).
func (n Names) LabelPrivilegedPods() string { return n.key("privileged-pods") }

// AnnotationClaimMemoryMax, on a Namespace, is the most GPU memory (a
// quantity, e.g. "20Gi") that each device of a ResourceClaim there may ask of
// the gpushare DeviceClass, where the chart's admission policy enforces it
// (dra.enabled). With a ResourceQuota on the class's devices it bounds the
// namespace's claimed memory: 4 devices × "20Gi" = 80 GiB at most.
func (n Names) AnnotationClaimMemoryMax() string { return n.key("claim-memory-max") }

// LabelDRA, with the value "true" on a Node, makes the node serve its cards
// through DRA (the node agent's --dra mode, which the chart runs there)
// instead of as device-plugin resources: <domain>/dra.
func (n Names) LabelDRA() string { return n.key("dra") }

// DeviceTaintUnhealthy is the key of the NoSchedule device taint the DRA
// mode puts on an unhealthy card in its ResourceSlice (value: the reason,
// e.g. XID-79): <domain>/unhealthy.
func (n Names) DeviceTaintUnhealthy() string { return n.key("unhealthy") }

// CDIClaimKind is the CDI kind (vendor/class) of the specs the DRA driver
// writes for the claims it prepares: gpushare.example.com/claim.
func (n Names) CDIClaimKind() string { return n.key("claim") }

// DeviceTaintIsolated is the key of the NoSchedule device taint on an
// isolated card (AnnotationIsolation, the isolation file): <domain>/isolated.
func (n Names) DeviceTaintIsolated() string { return n.key("isolated") }

// CardPinningAllowed is the value of LabelCardPinning that allows pinning.
const CardPinningAllowed = "allowed"

// AnnotationPolicy, on a Pod, names the placement policy for this pod
// (binpack, spread, bestfit, fgd, frag), one of those the extender's
// operator allows (--allowed-policies). Absent: the extender's --policy.
func (n Names) AnnotationPolicy() string { return n.key("policy") }

// AnnotationSimulatedContainers, on a Pod, is written only by the end-to-end
// tests' simulated node agent (test/nodeagent), never by a product program:
// what each container would get from the kubelet's device manager at start
// (device IDs, environment, mounts), as the agent's ContainerRecords JSON.
func (n Names) AnnotationSimulatedContainers() string { return n.key("e2e-containers") }

// AnnotationSimulatedGPUUse, on a Pod, is read only by the end-to-end tests'
// node agent: the GPU memory each container's process "uses", as
// "container=MiB[@cardIndex],..." (e.g. "c0=6144").
func (n Names) AnnotationSimulatedGPUUse() string { return n.key("e2e-gpu-use") }

// String is the names as flags would give them, for logs.
func (n Names) String() string {
	return fmt.Sprintf("domain=%s resource=%s wholeResource=%s", n.domain, n.resource, n.whole)
}
