// Package recordkey keeps the assignment-record keys in force while the programs run: a Ring reads
// the key directory (api.LoadRecordKeys; the extender's Secret of private keys, or the device
// plugin's ConfigMap of their public halves) at start and again every few seconds, so a rotation
// takes effect without a restart. Publisher writes the extender's public halves into that
// ConfigMap; NodeRing adds a device plugin's own node key.
//
// The kubelet updates a Secret volume atomically (the files are symlinks into a "..data" directory
// that is swapped in one rename), so a read sees either the old or the new keys, never half of
// each. A new content that is not a valid key set (not an Ed25519 key, no current key) does not
// replace the keys in force: the Ring keeps the last good keys, logs the error once per content,
// and counts it (gpushare_record_key_reload_errors_total; gpushare_record_key_in_force is 0 until
// the directory holds valid keys again).
package recordkey

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/internal/periodic"
)

// DefaultInterval is how often Run reads the directory again. Reading two small files costs
// microseconds; the kubelet's own Secret sync (about a minute) dominates how long a rotation takes
// to arrive.
const DefaultInterval = 5 * time.Second

// Metric names.
const (
	MetricReloadErrors = "gpushare_record_key_reload_errors_total"
	MetricReloads      = "gpushare_record_key_reloads_total"
	MetricInForce      = "gpushare_record_key_in_force"
)

// Ring is the record keys read from one directory, kept current. Its Keys are safe for concurrent
// use. Build it with Load.
type Ring struct {
	dir string
	log klog.Logger

	mu   sync.RWMutex
	keys api.RecordKeys
	// raw is the directory's content at the last read (valid or not): an unchanged content is
	// neither applied nor reported again.
	raw []byte

	reloads, errs prometheus.Counter
	inForce       prometheus.Gauge
}

// Load reads the keys in dir (api.LoadRecordKeys); the first read must succeed (a missing or short
// key is a configuration mistake that the error says how to fix).
func Load(dir string, log klog.Logger) (*Ring, error) {
	keys, err := api.LoadRecordKeys(dir)
	if err != nil {
		return nil, err
	}
	r := &Ring{
		dir: dir, log: log, keys: keys, raw: readRaw(dir),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricReloads, Help: "Times a changed record key directory was read and its keys put in force."}),
		errs:    prometheus.NewCounter(prometheus.CounterOpts{Name: MetricReloadErrors, Help: "Times a changed record key directory held no valid keys; the last good keys stay in force."}),
		inForce: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricInForce, Help: "1 when the keys in force are the record key directory's current content, 0 when its content is invalid and the last good keys are kept."}),
	}
	r.inForce.Set(1)
	return r, nil
}

// Start is what a program does with its --record-key-dir flag: nothing when dir is "" (a nil
// keyring: records are neither signed nor checked); else it loads the keys (a usage error naming
// the flag if they do not load), registers the ring's metrics on reg and reloads the keys every
// interval (DefaultInterval when 0) until ctx ends.
func Start(ctx context.Context, dir string, interval time.Duration, log klog.Logger, reg prometheus.Registerer) (api.RecordKeyring, error) {
	if dir == "" {
		return nil, nil
	}
	ring, err := Load(dir, log)
	if err != nil {
		return nil, cli.Usage(fmt.Errorf("--record-key-dir: %w", err))
	}
	if err := ring.Register(reg); err != nil {
		return nil, err
	}
	go ring.Run(ctx, nil, interval)
	return ring, nil
}

// Register adds the ring's metrics to reg.
func (r *Ring) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{r.reloads, r.errs, r.inForce} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("record key metrics: %w", err)
		}
	}
	return nil
}

// Keys returns the keys in force (api.RecordKeyring).
func (r *Ring) Keys() api.RecordKeys {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.keys
}

// ErrUnchanged is returned by Reload when the directory holds what it held at the last read.
var ErrUnchanged = errors.New("record key directory unchanged")

// Reload reads the directory again. A changed, valid content is put in force (nil); a changed,
// invalid one is reported (its error) and the keys in force stay; an unchanged one gives
// ErrUnchanged.
func (r *Ring) Reload() error {
	raw := readRaw(r.dir)
	r.mu.RLock()
	same := bytes.Equal(raw, r.raw)
	r.mu.RUnlock()
	if same {
		return ErrUnchanged
	}
	keys, err := api.LoadRecordKeys(r.dir)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = raw
	if err != nil {
		r.errs.Inc()
		r.inForce.Set(0)
		return err
	}
	r.keys = keys
	r.reloads.Inc()
	r.inForce.Set(1)
	return nil
}

// Run reloads every interval (DefaultInterval when 0) until ctx is done, logging each change.
func (r *Ring) Run(ctx context.Context, clk clock.WithTicker, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	clk = cmp.Or[clock.WithTicker](clk, clock.RealClock{})
	periodic.Run(ctx, clk, interval, nil, func() {
		switch err := r.Reload(); {
		case errors.Is(err, ErrUnchanged):
		case err != nil:
			r.log.Error(err, "The record key directory changed to something that is not a valid key set; the last good keys stay in force (fix the Secret)", "dir", r.dir)
		default:
			k := r.Keys()
			r.log.Info("Record keys reloaded", "dir", r.dir, "previousKey", len(k.Previous) > 0)
		}
	})
}

// readRaw is the directory's key files as one byte string (a file that cannot be read counts as its
// error text, so that a change of error is a change too).
func readRaw(dir string) []byte {
	var out []byte
	for _, name := range []string{api.RecordKeyCurrent, api.RecordKeyPrevious} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b = []byte("error: " + err.Error())
		}
		out = fmt.Appendf(out, "%s %d\n", name, len(b))
		out = append(out, b...)
	}
	return out
}
