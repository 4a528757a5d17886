package inspect

import "github.com/gpushare/gpushare/internal/cli"

// ExitCode maps Run's (or the command's) error to the process exit status:
// 0 for nil, ExitUsage for flag and argument errors, ExitError otherwise.
func ExitCode(err error) int { return cli.ExitCode(err) }
