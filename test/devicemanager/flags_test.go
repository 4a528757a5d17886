package devicemanager

import (
	"flag"

	"github.com/gpushare/gpushare/deviceplugin/app"
)

// flagSet registers the plugin's flags, so the test starts from the binary's defaults.
func flagSet(o *app.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("gpushare-device-plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}
