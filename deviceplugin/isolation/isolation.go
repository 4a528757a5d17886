// Package isolation watches the operator's isolation file
// ({"index": [...], "uuid": [...]}, api.ParseIsolationFile) and reports its
// content whenever it changes. A missing file isolates nothing. InForce is
// the policy for input that cannot be read (both sources: file and node
// annotation).
package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"

	"github.com/gpushare/gpushare/api"
)

// InForce is what one isolation source puts in force given its latest
// input: the parsed value, or, when the input cannot be read or parsed
// (err != nil), every card of the node (all: their UUIDs) until it is fixed.
//
// Fail closed, the same policy as the scheduler extender, which filters a
// node whose isolation annotation it cannot parse: the operator meant to
// take some card out of service, a typo must never put it (back) into
// service, and the policy must not depend on what was read before (a
// restarted plugin or extender has no "last good" value). Pods already on
// the cards keep running; the node takes no new gpu-mem pods until the
// input is fixed.
func InForce(iso api.Isolation, err error, all []string) api.Isolation {
	if err == nil {
		return iso
	}
	return api.Isolation{UUID: append([]string(nil), all...)}
}

// Read reads and parses the file; a missing file isolates nothing.
func Read(path string) (api.Isolation, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return api.Isolation{}, nil
	}
	if err != nil {
		return api.Isolation{}, err
	}
	return api.ParseIsolationFile(b)
}

// WatchFile calls fn with the file's content now and after every change,
// until ctx is done. It watches the file's directory, so that replacing the
// file (editors, ConfigMap volume updates) and creating or deleting it are
// seen. On a read or parse error fn gets the error (see InForce for what
// the caller puts in force then).
func WatchFile(ctx context.Context, path string, fn func(api.Isolation, error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch isolation file directory %s: %w", dir, err)
	}
	fn(Read(path))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Errors:
			// The watcher lost events (e.g. an overflow): the file may have
			// changed unseen, so read it again. Not a content error.
			fn(Read(path))
		case e := <-w.Events:
			// ConfigMap volumes swap a "..data" symlink: re-read on any event
			// in the directory; unchanged content is a no-op downstream.
			_ = e
			fn(Read(path))
		}
	}
}
