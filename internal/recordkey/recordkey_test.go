package recordkey

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/cli"

	"github.com/gpushare/gpushare/internal/podtest"
)

// secretDir writes a directory the way the kubelet writes a Secret volume
// (its AtomicWriter): the files are symlinks into "..data", itself a symlink
// to a timestamped directory; an update writes a new timestamped directory
// and swaps "..data" in one rename.
type secretDir struct {
	t   *testing.T
	dir string
	n   int
}

func newSecretDir(t *testing.T, files map[string]string) *secretDir {
	s := &secretDir{t: t, dir: t.TempDir()}
	s.update(files)
	for name := range map[string]bool{api.RecordKeyCurrent: true, api.RecordKeyPrevious: true} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// update swaps in a new content (a key not in files is absent).
func (s *secretDir) update(files map[string]string) {
	s.t.Helper()
	s.n++
	ts := fmt.Sprintf("..2026_11_23_12_00_%02d.%d", s.n, s.n)
	if err := os.Mkdir(filepath.Join(s.dir, ts), 0o755); err != nil {
		s.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(s.dir, ts, name), []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		s.t.Fatal(err)
	}
}

var (
	oldKey = podtest.RecordKeyFile("old-key")
	newKey = podtest.RecordKeyFile("new-key")
)

func record(uid string) api.Assignment {
	return api.Assignment{Version: api.AssignmentVersion, PodUID: types.UID("uid-" + uid), Node: "n", Unit: api.UnitGiB, Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "c", CardUUID: "GPU-1", Units: 4}}}
}

func sign(t *testing.T, keys api.RecordKeys, a api.Assignment) api.Assignment {
	t.Helper()
	s, err := keys.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The rotation of docs/security.md, step by step, under one running Ring:
// each Secret update takes effect at the next read, without a restart; a
// record signed with the old key verifies as long as the old key is in the
// Secret (as current or previous), and no longer once it is dropped.
func TestRingFollowsARotatedSecret(t *testing.T) {
	s := newSecretDir(t, map[string]string{api.RecordKeyCurrent: oldKey})
	r, err := Load(s.dir, ktesting.NewLogger(t, ktesting.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	byOld := sign(t, keysOf(oldKey), record("a"))
	byNew := sign(t, keysOf(newKey), record("b"))
	if err := r.Reload(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("Reload of an unchanged directory = %v, want ErrUnchanged", err)
	}

	steps := []struct {
		name        string
		files       map[string]string
		oldVerifies bool
		newVerifies bool
		signsWith   string
	}{
		{"1: new key added as previous", map[string]string{api.RecordKeyCurrent: oldKey, api.RecordKeyPrevious: newKey}, true, true, oldKey},
		{"2: new key current, old previous", map[string]string{api.RecordKeyCurrent: newKey, api.RecordKeyPrevious: oldKey}, true, true, newKey},
		{"3: old key dropped", map[string]string{api.RecordKeyCurrent: newKey}, false, true, newKey},
	}
	for _, st := range steps {
		s.update(st.files)
		if err := r.Reload(); err != nil {
			t.Fatalf("step %s: Reload = %v", st.name, err)
		}
		k := r.Keys()
		if got := k.Verify(byOld) == nil; got != st.oldVerifies {
			t.Errorf("step %s: a record signed with the old key verifies = %v, want %v", st.name, got, st.oldVerifies)
		}
		if got := k.Verify(byNew) == nil; got != st.newVerifies {
			t.Errorf("step %s: a record signed with the new key verifies = %v, want %v", st.name, got, st.newVerifies)
		}
		signed := sign(t, k, record("c"))
		if (keysOf(st.signsWith)).Verify(signed) != nil {
			t.Errorf("step %s: new records are not signed with the expected key", st.name)
		}
	}
	if got := testutil.ToFloat64(r.reloads); got != 3 {
		t.Errorf("%s = %v, want 3", MetricReloads, got)
	}
}

// A Secret changed to something that is not a valid key set (a short key,
// no current key) leaves the last good keys in force, reports it once and
// sets the in-force gauge to 0; a valid content afterwards is taken again.
func TestRingKeepsTheLastGoodKeysWhenTheSecretBecomesInvalid(t *testing.T) {
	s := newSecretDir(t, map[string]string{api.RecordKeyCurrent: oldKey})
	r, err := Load(s.dir, ktesting.NewLogger(t, ktesting.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}
	byOld := sign(t, keysOf(oldKey), record("a"))
	for i, bad := range []map[string]string{
		{api.RecordKeyCurrent: "short"},
		{api.RecordKeyPrevious: newKey},
		{api.RecordKeyCurrent: newKey, api.RecordKeyPrevious: "short"},
	} {
		s.update(bad)
		if err := r.Reload(); err == nil || errors.Is(err, ErrUnchanged) {
			t.Fatalf("bad content %d: Reload = %v, want its error", i, err)
		}
		if err := r.Reload(); !errors.Is(err, ErrUnchanged) {
			t.Errorf("bad content %d read again: %v, want ErrUnchanged (reported once)", i, err)
		}
		if err := r.Keys().Verify(byOld); err != nil {
			t.Errorf("bad content %d: the last good keys are not in force: %v", i, err)
		}
		if got := testutil.ToFloat64(r.inForce); got != 0 {
			t.Errorf("bad content %d: %s = %v, want 0", i, MetricInForce, got)
		}
	}
	if got := testutil.ToFloat64(r.errs); got != 3 {
		t.Errorf("%s = %v, want 3", MetricReloadErrors, got)
	}
	s.update(map[string]string{api.RecordKeyCurrent: newKey})
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if r.Keys().Verify(byOld) == nil || testutil.ToFloat64(r.inForce) != 1 {
		t.Errorf("a valid content after the bad ones is not in force")
	}
	if n, err := testutil.GatherAndCount(reg, MetricReloads, MetricReloadErrors, MetricInForce); err != nil || n != 3 {
		t.Errorf("gathered %d metrics (%v), want 3", n, err)
	}
}

// Run reads the directory again on its ticker: a swap under a running Ring
// is in force after the next tick.
func TestRunPicksUpASwapOnItsTicker(t *testing.T) {
	s := newSecretDir(t, map[string]string{api.RecordKeyCurrent: oldKey})
	r, err := Load(s.dir, ktesting.NewLogger(t, ktesting.DefaultConfig))
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, clk, time.Second) }()
	defer func() { cancel(); <-done }()

	s.update(map[string]string{api.RecordKeyCurrent: newKey})
	if !r.Keys().Current.Equal(keysOf(oldKey).Current) {
		t.Fatal("the new key is in force before any tick")
	}
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		clk.Step(time.Second)
		return r.Keys().Current.Equal(keysOf(newKey).Current), nil
	})
	if err != nil {
		t.Fatalf("the swapped key is not in force after ticks: %v", err)
	}
}

// The first read must find valid keys: a missing directory or a short key
// fails with a message saying what to do.
func TestLoadRefusesAMissingOrShortKey(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none"), ktesting.NewLogger(t, ktesting.DefaultConfig)); err == nil {
		t.Error("Load of a missing directory succeeded")
	}
	s := newSecretDir(t, map[string]string{api.RecordKeyCurrent: "short"})
	_, err := Load(s.dir, ktesting.NewLogger(t, ktesting.DefaultConfig))
	if err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Errorf("Load of a short key = %v, want an error saying the size to use", err)
	}
}

// Start is the programs' --record-key-dir: no directory, no keyring; a
// directory that does not load is a usage error naming the flag; one that
// does gives the ring in force with its metrics registered.
func TestStartFollowsTheRecordKeyDirFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := ktesting.NewLogger(t, ktesting.DefaultConfig)
	if keys, err := Start(ctx, "", 0, log, prometheus.NewRegistry()); keys != nil || err != nil {
		t.Errorf("Start without a directory = %v, %v; want no keyring and no error", keys, err)
	}
	_, err := Start(ctx, filepath.Join(t.TempDir(), "none"), 0, log, prometheus.NewRegistry())
	if !errors.Is(err, cli.ErrUsage) || !strings.HasPrefix(err.Error(), "--record-key-dir: ") {
		t.Errorf("Start of a missing directory = %v, want a usage error naming --record-key-dir", err)
	}
	s := newSecretDir(t, map[string]string{api.RecordKeyCurrent: oldKey})
	reg := prometheus.NewRegistry()
	keys, err := Start(ctx, s.dir, time.Hour, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys.Keys().Current; !got.Equal(keysOf(oldKey).Current) {
		t.Errorf("keys in force = %q, want the directory's", got)
	}
	if n, err := testutil.GatherAndCount(reg, MetricInForce); err != nil || n != 1 {
		t.Errorf("%s registered %d times (%v), want once", MetricInForce, n, err)
	}
}

// keysOf is the key set a Secret key file holds.
func keysOf(file string) api.RecordKeys {
	k, err := api.RecordKeysFrom(map[string][]byte{api.RecordKeyCurrent: []byte(file)})
	if err != nil {
		panic(err)
	}
	return k
}
