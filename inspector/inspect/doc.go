// Package inspect owns `kubectl inspect gpushare`: Gather (gather.go, the only
// code that talks to the API server) reads nodes, pods and the DRA driver's
// slices and claims; Build (build.go, dra.go), a pure function, decodes them
// through api (so it counts exactly what the extender counts) into a View of
// each card's memory held by device-plugin pods and DRA claims, with health
// warnings; print.go renders a View as a table, per-card details, JSON or
// YAML. Options (options.go) are kubectl's sample-cli-plugin shape.
package inspect
