// Package isolation watches the operator's isolation file
// ({"index": [...], "uuid": [...]}, api.ParseIsolationFile) and reports its
// content whenever it changes. A missing file isolates nothing.
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
// seen. On a parse error fn gets the error (the caller keeps the last good
// content).
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
		case err := <-w.Errors:
			fn(api.Isolation{}, fmt.Errorf("watching %s: %w", path, err))
		case e := <-w.Events:
			// ConfigMap volumes swap a "..data" symlink: re-read on any event
			// in the directory; unchanged content is a no-op downstream.
			_ = e
			fn(Read(path))
		}
	}
}
