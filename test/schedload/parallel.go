package schedload

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// ForEach calls fn(i) for i in [0, n), at most workers at once; it stops
// handing out work at the first error and returns it.
func ForEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(workers, 1))
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}
