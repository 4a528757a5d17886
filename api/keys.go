package api

// Labels operators set. The keys derived from the configured domain are
// Names' methods (names.go).
const (
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
