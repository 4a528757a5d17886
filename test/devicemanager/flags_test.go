package devicemanager

import (
	"github.com/spf13/pflag"

	"github.com/gpushare/gpushare/deviceplugin/app"
)

// flagSet registers the plugin's flags, so the test starts from the binary's defaults.
func flagSet(o *app.Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("gpushare-device-plugin", pflag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}
