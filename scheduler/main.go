// Command gpushare-scheduler is the gpushare scheduler extender: it answers
// kube-scheduler's filter, prioritize and bind calls for pods that request
// example.com/gpu-mem, placing each container on one GPU card. See
// docs/design.md.
package main

import (
	"os"

	"github.com/gin-gonic/gin"

	"github.com/gpushare/gpushare/internal/cli"
	"github.com/gpushare/gpushare/scheduler/app"
)

func main() {
	// gin's process-wide mode: no route dump or debug warnings in the log.
	gin.SetMode(gin.ReleaseMode)
	os.Exit(cli.Run(app.NewCommand(os.LookupEnv)))
}
