package api

// Annotation and label keys. No other package spells these strings.
const (
	// Prefix is the domain of every gpushare annotation and label.
	Prefix = "gpushare.example.com/"

	// AnnotationInventory, on a Node, holds the Inventory the node's device
	// plugin publishes (EncodeInventory).
	AnnotationInventory = Prefix + "inventory"

	// AnnotationAssignment, on a Pod, holds the Assignment the extender wrote
	// at bind (EncodeAssignment).
	AnnotationAssignment = Prefix + "assignment"

	// AnnotationIsolation, on a Node, lists cards an operator has isolated:
	// comma-separated card indexes and/or UUIDs, e.g. "1,GPU-5e1c…". See
	// ParseIsolation.
	AnnotationIsolation = Prefix + "isolate"

	// LabelGPUCount, on a Node, is the number of GPU cards the plugin found.
	LabelGPUCount = Prefix + "gpu-count"
	// LabelGPUModel, on a Node, is the model of its cards (SanitizeLabelValue
	// applied); "mixed" when the cards differ.
	LabelGPUModel = Prefix + "gpu-model"
	// LabelGPUMemory, on a Node, is the memory of its largest card in the
	// node's unit, followed by the unit, e.g. "80GiB".
	LabelGPUMemory = Prefix + "gpu-memory"

	// LabelEnabled is the label operators set (value LabelEnabledValue) on
	// the nodes where the device plugin should run.
	LabelEnabled = "gpushare"
	// LabelEnabledValue is LabelEnabled's value on those nodes.
	LabelEnabledValue = "true"
)

// SanitizeLabelValue turns s into a valid label value: characters outside
// [A-Za-z0-9._-] become '-', the result is trimmed to 63 characters and to
// start and end with an alphanumeric. "NVIDIA H100 80GB HBM3" becomes
// "NVIDIA-H100-80GB-HBM3".
func SanitizeLabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	isAlnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for len(b) > 0 && !isAlnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !isAlnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}
