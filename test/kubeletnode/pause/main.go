// Command pause is the container lane's sandbox ("pause") image: a static
// program that holds the pod's namespaces until it is told to stop. No
// registry is reachable from CI, so the image is built from this and
// imported with ctr.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}
