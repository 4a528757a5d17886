package server

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/scheduler/cache"
)

// DRASource is what /inspect reads of the gpushare DRA driver: what it
// holds per node (api.Names.DRAUsage), or why that is not known yet.
// cache.DRA implements it.
type DRASource interface {
	Usage() (map[string]*api.DRANode, error)
}

var _ DRASource = (*cache.DRA)(nil)

// inspect is the named nodes (every known one when none is named) as
// /inspect shows them: the cache's view, with the DRA claims when the
// server has a DRASource (cache.AddDRA). When the claims cannot be shown
// the answer carries a Warning header saying why (api.ExtenderWarningDRAUnreadable).
func (s *Server) inspect(c *gin.Context, names ...string) []api.ExtenderNode {
	nodes := s.cache.Inspect(names...)
	if s.draUsage == nil {
		return nodes
	}
	usage, err := s.draUsage.Usage()
	if err != nil {
		c.Header("Warning", fmt.Sprintf("299 - %q", api.ExtenderWarningDRAUnreadable+": "+err.Error()))
		return nodes
	}
	return cache.AddDRA(nodes, usage)
}
