package httpserve

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// A server without a write or idle timeout lets a client that never reads
// hold its connection and the answer's buffer for ever.
func TestEveryTimeoutIsSet(t *testing.T) {
	s := New(context.Background(), http.NotFoundHandler())
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": s.ReadHeaderTimeout, "ReadTimeout": s.ReadTimeout,
		"WriteTimeout": s.WriteTimeout, "IdleTimeout": s.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s is not set", name)
		}
	}
	if s.BaseContext == nil {
		t.Error("requests do not carry the program's context")
	}
}
