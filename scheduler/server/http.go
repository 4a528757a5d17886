package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/api"
)

// errorBody is every error response, the contract's api.ExtenderError. Its
// "error" key also decodes into the Error field of the extender result types
// (encoding/json matches names case-insensitively), so kube-scheduler reads
// it as an extender error.
type errorBody = api.ExtenderError

// httpStatus maps an error to its HTTP status: the one place that does.
// Failures the extender protocol can carry (a bind that no longer fits, a
// node that does not fit) are not errors here: they travel in the result
// with 200, so kube-scheduler puts their message in the pod's events.
func httpStatus(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrNotReady):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func respond(c *gin.Context, v any, err error) {
	if err != nil {
		c.JSON(httpStatus(err), errorBody{Error: err.Error()})
		return
	}
	c.JSON(http.StatusOK, v)
}

// decode reads a JSON body into v. Trailing data, a body over the limit and
// malformed JSON are bad requests.
func (s *Server) decode(c *gin.Context, v any) error {
	err := decodeJSON(http.MaxBytesReader(c.Writer, c.Request.Body, s.maxBody), v)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("request body over %d bytes: %w", s.maxBody, err)
	}
	return err
}

// Handler returns every HTTP route: the extender verbs and the read-only
// ones. gatherer serves /metrics (nil: no route).
func (s *Server) Handler(gatherer prometheus.Gatherer) http.Handler {
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/filter", func(c *gin.Context) { s.serveArgs(c, verbFilter) })
	r.POST("/prioritize", func(c *gin.Context) { s.serveArgs(c, verbPrioritize) })
	r.POST("/dra/prioritize", s.serveDRA)
	r.POST("/bind", func(c *gin.Context) {
		var args extenderv1.ExtenderBindingArgs
		if err := s.decode(c, &args); err != nil {
			respond(c, nil, err)
			return
		}
		res, err := s.Bind(c.Request.Context(), &args)
		respond(c, res, err)
	})
	r.POST("/preempt", func(c *gin.Context) {
		var args extenderv1.ExtenderPreemptionArgs
		if err := s.decode(c, &args); err != nil {
			respond(c, nil, err)
			return
		}
		res, err := s.Preempt(c.Request.Context(), &args)
		respond(c, res, err)
	})
	s.readOnlyRoutes(r, gatherer)
	r.NoRoute(func(c *gin.Context) {
		respond(c, nil, fmt.Errorf("%w: %s %s", ErrNotFound, c.Request.Method, c.Request.URL.Path))
	})
	return r
}

// argsVerb names an extender verb whose body is ExtenderArgs.
type argsVerb int

const (
	verbFilter argsVerb = iota
	verbPrioritize
)

// serveArgs answers a verb whose body is ExtenderArgs: the body decoded with
// its candidates resolved, the verb's answer written, then the pooled names
// and candidates given back.
func (s *Server) serveArgs(c *gin.Context, verb argsVerb) {
	var args extenderv1.ExtenderArgs
	cands, err := s.decodeArgs(c, &args)
	if err != nil {
		respond(c, nil, err)
		return
	}
	defer releaseNames(&args)
	defer s.putCandidates(cands)
	if verb == verbPrioritize {
		res, err := s.prioritize(c.Request.Context(), &args, cands)
		respond(c, res, err)
		return
	}
	res, err := s.filter(c.Request.Context(), &args, cands)
	if err == nil {
		var b []byte
		if b, err = encodeFilter(res); err == nil {
			c.Data(http.StatusOK, "application/json; charset=utf-8", b)
			return
		}
	}
	respond(c, nil, err)
}

// ReadOnlyHandler returns only the read-only routes (/inspect, /healthz,
// /readyz, /metrics): for a listener that probes and Prometheus reach while
// the extender verbs stay on an address only kube-scheduler reaches (e.g.
// 127.0.0.1 in a sidecar).
func (s *Server) ReadOnlyHandler(gatherer prometheus.Gatherer) http.Handler {
	r := gin.New()
	r.Use(gin.Recovery())
	s.readOnlyRoutes(r, gatherer)
	r.NoRoute(func(c *gin.Context) {
		respond(c, nil, fmt.Errorf("%w: %s %s (the extender verbs are not served on this address)", ErrNotFound, c.Request.Method, c.Request.URL.Path))
	})
	return r
}

func (s *Server) readOnlyRoutes(r *gin.Engine, gatherer prometheus.Gatherer) {
	r.GET("/inspect", func(c *gin.Context) {
		respond(c, s.inspect(c), nil)
	})
	r.GET("/inspect/:node", func(c *gin.Context) {
		node := c.Param("node")
		infos := s.inspect(c, node)
		if len(infos) == 0 {
			respond(c, nil, fmt.Errorf("%w: node %q is not in the extender's cache", ErrNotFound, node))
			return
		}
		respond(c, infos[0], nil)
	})
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET("/readyz", func(c *gin.Context) {
		if !s.cache.Synced() {
			respond(c, nil, ErrNotReady)
			return
		}
		c.String(http.StatusOK, "ok")
	})
	if gatherer != nil {
		h := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
		r.GET("/metrics", gin.WrapH(h))
	}
}
