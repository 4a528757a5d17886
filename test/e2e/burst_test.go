package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/test/schedload"
)

// Burst sizes: big enough that kube-scheduler hands out binds faster than the
// extender's client may write them for more than its 10 s httpTimeout (on
// main before the bind fix, 400 pods on these nodes were all bound, slowly
// — 174 by 15 s, 218 by 30 s, 400 by 52 s — while 1,000 stalled), small
// enough that a healthy run takes well under a minute.
const (
	burstNodes    = 300
	burstCards    = 8
	burstCardGiB  = 80
	burstPods     = 1000
	burstPodGiB   = 8
	burstClients  = 32
	burstDeadline = 5 * time.Minute
)

// An operator creates a thousand 8 GiB pods at once against a few hundred
// GPU nodes, with the shipped configuration (the extender's default flags,
// the project's KubeSchedulerConfiguration): every pod ends bound, each with a
// valid assignment record for its node, and no card holds more than its
// memory. This is the regression guard for issue 11's stall (binds waiting in
// the extender's client rate limiter until kube-scheduler's 10 s httpTimeout
// cancelled them: 294 of 2,000 bound, then none for 15 minutes). Not a timing
// test: the deadline is only there to fail instead of hanging.
//
// The nodes are API objects (no node agent, no device plugin): their
// inventory and allocatable are written as the plugin would, and their
// leases are renewed so that the node lifecycle controller keeps them Ready.
func TestBurstOfPodsAllBoundWithValidRecordsAndNoCardOverCapacity(t *testing.T) {
	c := setup(t)
	needExtender(t)
	ctx, cancel := context.WithTimeout(context.Background(), burstDeadline+3*time.Minute)
	defer cancel()

	// The test's own client is not rate-limited: the burst must reach the
	// API server at once.
	cfg := *c.RESTConfig
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	fleet := schedload.Fleet{Prefix: "burst", Nodes: burstNodes, CardsPerNode: burstCards, CardUnits: burstCardGiB}
	start := time.Now()
	t.Cleanup(func() {
		if err := schedload.DeleteNodes(context.Background(), client, fleet, burstClients); err != nil {
			t.Errorf("deleting the burst nodes: %v", err)
		}
	})
	if err := schedload.CreateNodes(ctx, client, fleet, burstClients); err != nil {
		t.Fatal(err)
	}
	hb, err := schedload.StartHeartbeat(ctx, client, fleet, 10*time.Second, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hb.Stop(); err != nil {
			t.Errorf("renewing the burst nodes' leases: %v", err)
		}
	})
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", extenderPort)
	if err := schedload.WaitCards(ctx, metricsURL, fleet.Prefix+"-", fleet.Cards(), time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes × %d cards of %d GiB created and in the extender's cache in %v", burstNodes, burstCards, burstCardGiB, time.Since(start).Round(time.Millisecond))

	ns, err := schedload.NewNamespace(ctx, client, "burst", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := schedload.DeleteNamespace(context.Background(), client, ns, ptr.To[int64](0), 2*time.Minute); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	rec, err := schedload.RecordBinds(ctx, client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()

	burst := schedload.Burst{Namespace: ns, Prefix: "burst", Pods: burstPods, Units: burstPodGiB, SchedulerName: schedulerName}
	start = time.Now()
	created, err := schedload.CreatePods(ctx, client, burst, burstClients)
	if err != nil {
		t.Fatal(err)
	}
	err = rec.WaitBound(ctx, burstPods, start, burstDeadline)
	times := rec.Times()
	var progress []string
	for _, d := range []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		progress = append(progress, fmt.Sprintf("%v: %d", d, schedload.BoundBy(start, times, d)))
	}
	var stalled *schedload.StalledError
	switch {
	case errors.As(err, &stalled):
		t.Errorf("%v; bound by %v (pods created in %v)\nextender log: %s", stalled, progress, created.Round(time.Millisecond), extender.LogPath)
	case err != nil:
		t.Fatal(err)
	default:
		th := schedload.MeasureThroughput(start, times, burstPods)
		t.Logf("%d pods created in %v, all bound %v after the first creation (%.0f pods/s; bound by %v)",
			burstPods, created.Round(time.Millisecond), th.Elapsed.Round(time.Millisecond), th.Overall, progress)
	}

	report, err := schedload.CheckAssignments(ctx, client, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range report.Problems {
		t.Error(p)
	}
	if report.OK() {
		t.Logf("%d pods bound with valid records on %d cards (%d full), none over capacity", report.Recorded, report.CardsUsed, report.FullCards)
	}
}
