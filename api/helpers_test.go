package api

import "encoding/json"

// jsonString marshals v without the validation Encode* applies, as a forged
// annotation would be written.
func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
