// Command gpushare-device-plugin is gpushare's kubelet device plugin: it
// advertises GPU memory as example.com/gpu-mem units, one device per unit,
// gives each container the card the scheduler extender assigned, and
// publishes the node's GPU inventory. docs/deviceplugin.md documents it.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/deviceplugin/app"
	"github.com/gpushare/gpushare/internal/cli"
)

func main() {
	hup := make(chan os.Signal, 1) // SIGHUP: re-register with the kubelet
	signal.Notify(hup, syscall.SIGHUP)
	os.Exit(cli.Run(app.NewCommand(os.LookupEnv, hup)))
}
