package api

import (
	"encoding/json"
	"fmt"
)

// record is a versioned record the programs write as JSON in an annotation
// (Assignment, Inventory): it knows how to check itself.
type record interface{ Validate() error }

// encodeRecord validates r and returns its annotation value; a value that
// cannot be marshalled is reported as errInvalid (the record's sentinel).
func encodeRecord[R record](r R, errInvalid error) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errInvalid, err)
	}
	return string(b), nil
}

// decodeRecord parses and validates an annotation value; what does not
// parse is reported as errInvalid. On error it returns the zero record,
// never a half-parsed one.
func decodeRecord[R record](s string, errInvalid error) (R, error) {
	var r, zero R
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return zero, fmt.Errorf("%w: %v", errInvalid, err)
	}
	if err := r.Validate(); err != nil {
		return zero, err
	}
	return r, nil
}

// annotationRecord decodes the record an object carries in its annotations
// under key; an object without that annotation gives missing().
func annotationRecord[R record](annotations map[string]string, key string, decode func(string) (R, error), missing func() error) (R, error) {
	s, ok := annotations[key]
	if !ok {
		var zero R
		return zero, missing()
	}
	return decode(s)
}
