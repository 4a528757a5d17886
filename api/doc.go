// Package api is gpushare's contract: the one place that defines what the
// scheduler extender, the device plugin and the inspector say to each other
// through the Kubernetes API.
//
// It owns:
//   - the names one installation uses (Names, built by NewNames from the
//     configured domain and resource names, or DefaultNames): the extended
//     resource names and every annotation and label key the programs read or
//     write, derived from the domain in one place; and the memory unit
//     arithmetic;
//   - the node GPU inventory (Inventory), published by the device plugin on
//     its Node and read by the extender and the inspector;
//   - the assignment record (Assignment), written on a pod by the extender at
//     bind and completed by the device plugin at Allocate;
//   - operator card isolation (Isolation);
//   - how a pod's demand is read: gpu-mem per container and its CPU and
//     memory request (Names.RequestFromPod);
//   - whether a pod still holds its units (HoldsUnits, MayStartContainers);
//   - a card's state under the operator's isolation (Isolation.Apply);
//   - the extender's GET /inspect JSON (ExtenderNode, ExtenderError).
//
// Every record is versioned, has one Encode and one Decode, and Decode always
// validates: a program never acts on a record it could not validate.
// docs/protocol.md describes the same contract in prose.
package api
