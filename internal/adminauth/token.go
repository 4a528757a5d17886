package adminauth

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// minTokenBytes is the shortest scrape token accepted: 32 bytes of a
// random alphanumeric token are about 190 bits.
const minTokenBytes = 32

// withToken makes g accept only the bearer token in file (read once: a new
// token takes effect when the program restarts). The comparison takes the
// same time whatever the token sent, and asks nobody.
func (g *Guard) withToken(file string) (*Guard, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("adminAuth.tokenFile: %w", err)
	}
	want := bytes.TrimSpace(b)
	if len(want) < minTokenBytes {
		return nil, fmt.Errorf("adminAuth.tokenFile %s: the token has %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", file, len(want), minTokenBytes)
	}
	g.authn = func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
				writeStatus(w, http.StatusUnauthorized, "Unauthorized",
					fmt.Sprintf("%s needs the scrape token (Authorization: Bearer ...): the key token of the Secret the gpushare chart names <release>-metrics-token.", r.URL.Path))
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	return g, nil
}
