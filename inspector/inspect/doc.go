// Package inspect owns `kubectl inspect gpushare`: it reads the cluster's
// nodes and pods and the gpushare DRA driver's ResourceSlices and
// ResourceClaims, decodes them through the contract package api (so that it
// counts exactly what the scheduler extender counts), builds a typed view of
// per-node, per-card GPU-memory allocation (View) where a card's memory is
// what device-plugin pods and DRA claims hold on it, and prints that view as
// a table, a detailed per-card report, JSON or YAML.
//
// The pieces, in the order a run uses them:
//   - Options (options.go): flags, Complete/Validate/Run, like kubectl's
//     sample-cli-plugin; ExitCode maps Run's error to the process exit status.
//   - Gather (gather.go): the only code that talks to the API server, through
//     an injected kubernetes.Interface.
//   - Build (build.go, dra.go): a pure function from nodes, pods and DRA
//     objects (api.Names.DRAUsage) to a View, including the health warnings
//     about each node's GPU reporting.
//   - PrintTable, PrintDetails, PrintJSON, PrintYAML (print.go): renderers of
//     a View; they never look at Kubernetes objects.
package inspect
