package recordkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// With a key file the node key survives a restart, and two processes of one
// node starting together share one key; without one each start has its own.
func TestNodeKeyFileKeepsTheKeyAcrossRestarts(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state", "node-record-key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := nodeKey(file)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("process %d got another key than process 0", i)
		}
	}
	again, err := nodeKey(file)
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatalf("after a restart: %v, same key %v", err, bytes.Equal(again, keys[0]))
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	a, _ := nodeKey("")
	b, _ := nodeKey("")
	if bytes.Equal(a, b) {
		t.Error("two starts without a key file got the same key")
	}
	if err := os.WriteFile(file, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeKey(file); err == nil || !strings.Contains(err.Error(), "delete it and the plugin makes a new one") {
		t.Errorf("a damaged key file: %v", err)
	}
}
