package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipReasonBoundsEveryNodesReason(t *testing.T) {
	long := strings.Repeat("é", 2000) // 4,000 bytes, two per rune
	got := clipReason(long)
	if len(got) > MaxReasonBytes || !strings.HasSuffix(got, "more bytes)") || !utf8.ValidString(got) {
		t.Errorf("clipReason: %d bytes, valid %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-20:])
	}
	if short := "card too full"; clipReason(short) != short {
		t.Errorf("a short reason is changed: %q", clipReason(short))
	}
}
