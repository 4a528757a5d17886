package isolation

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/api"
)

func TestWatchFileFollowsEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "unhealthyDevices.json")
	var mu sync.Mutex
	var last string
	var lastErr error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- WatchFile(ctx, path, func(iso api.Isolation, err error) {
			mu.Lock()
			defer mu.Unlock()
			lastErr = err
			if err == nil {
				last = iso.String()
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchFile: %v", err)
		}
	}()
	expect := func(what, want string, wantErr bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return last == want && (lastErr != nil) == wantErr, nil
		})
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: isolation %q (err %v), want %q (error: %v)", what, last, lastErr, want, wantErr)
		}
	}
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // replaced atomically, as editors and ConfigMaps do
			t.Fatal(err)
		}
	}
	expect("a missing file isolates nothing", "", false)
	write(`{"index": [1], "uuid": ["GPU-77c0"]}`)
	expect("created", "1,GPU-77c0", false)
	write(`{"index": [0, 1]}`)
	expect("edited", "0,1", false)
	write(`{"index": "x"}`)
	expect("a broken file reports an error and keeps the last good content", "0,1", true)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expect("deleted", "", false)
}

// One policy for isolation input that cannot be read: every card of the node
// is isolated until it is fixed (fail closed, like the scheduler extender,
// which filters a node whose annotation it cannot parse), whatever was in
// force before.
func TestInForceFailsClosed(t *testing.T) {
	all := []string{"GPU-a", "GPU-b"}
	good, err := api.ParseIsolation("1")
	if err != nil {
		t.Fatal(err)
	}
	if got := InForce(good, nil, all); got.String() != "1" {
		t.Errorf("good input: %q in force, want %q", got.String(), "1")
	}
	_, bad := api.ParseIsolation("card-one")
	if bad == nil {
		t.Fatal("ParseIsolation accepted card-one")
	}
	if got := InForce(api.Isolation{}, bad, all); got.String() != "GPU-a,GPU-b" {
		t.Errorf("malformed input: %q in force, want every card (GPU-a,GPU-b)", got.String())
	}
	_, bad = api.ParseIsolationFile([]byte(`{"index": "x"}`))
	if got := InForce(api.Isolation{}, bad, all); !got.Isolates(0, "GPU-a") || !got.Isolates(1, "GPU-b") {
		t.Errorf("malformed file: %q in force, want every card", got.String())
	}
}
