// Package httpserve builds the HTTP servers of gpushare's programs (the extender's verbs and admin
// endpoints, the device plugin's metrics) with the same timeouts, so that no slow or stalled client
// can pin a connection and its buffers.
package httpserve

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Timeouts of every server New builds. A client gets 10 s to send its headers and its whole request
// (kube-scheduler sends a filter call in milliseconds and gives up after its httpTimeout, 5 s in
// the chart) and 30 s to read the answer (the largest, /inspect of a big cluster or a Prometheus
// scrape, is written in well under a second); an idle keep-alive connection closes after 2 minutes.
const (
	ReadTimeout  = 10 * time.Second
	WriteTimeout = 30 * time.Second
	IdleTimeout  = 2 * time.Minute
)

// New is a server for h whose requests carry ctx (cancelled when the program stops).
func New(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}
