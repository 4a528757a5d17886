// Package api is gpushare's contract: the one place that defines what the
// scheduler extender, the device plugin and the inspector say to each other
// through the Kubernetes API.
//
// It owns the names one installation uses (Names: resource names, every
// annotation and label key) and unit arithmetic, the node inventory
// (Inventory), the assignment record (Assignment), card isolation
// (Isolation), how a pod's demand is read (Names.RequestFromPod), whether a
// pod holds its units (HoldsUnits, MayStartContainers) and the extender's
// /inspect JSON (ExtenderNode).
//
// Every record is versioned, has one Encode and one Decode, and Decode always
// validates: a program never acts on a record it could not validate.
// docs/protocol.md describes the same contract in prose.
package api
