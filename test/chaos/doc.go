// Package chaos is gpushare's chaos run (issue 16): a seeded random sequence
// of operations against the end-to-end environment — pod creations of every
// shape, deletions, Deployment scaling, SIGKILL and restart of the extender,
// of a device plugin and of a node agent (the kubelet), card isolation, and
// concurrent writers — with the product's invariants checked after every
// operation and at the end.
//
// The package owns three things, each usable without a cluster:
//   - Plan: the operation sequence, a pure function of the seed and the
//     topology (same seed, same test binary → same sequence);
//   - Observation and the Check functions: what the run looks at (pods, Nodes,
//     each node agent's PodResources account, the extender's /inspect) and the
//     invariants over it, pure functions of one observation;
//   - Runner: executes a plan through Hooks (the e2e suite supplies the
//     restarts), observes and checks after every operation, and stops at the
//     first violation with the seed, the operation log and the state.
//
// What is not deterministic is timing: how the operations interleave with
// kube-scheduler, the extender, the kubelet's device manager and the device
// plugin. docs/e2e.md ("The chaos run") explains the invariants and figures.
package chaos
