package plugin

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/internal/podtest"
)

// notAdvertisedCodes are the gRPC codes an Allocate of device IDs this
// plugin never advertised fails with. The kubelet only sends advertised IDs,
// so such a call comes from a broken or foreign peer; the answer must be an
// error (never a panic, never units of a card), and InvalidArgument says
// whose mistake it is.
var notAdvertisedCodes = []codes.Code{codes.InvalidArgument}

// matchCodes are the answers to an Allocate of advertised units of one card:
// granted, no pending container of that size (NotFound), or the container's
// pod was not placed by the extender (FailedPrecondition).
var matchCodes = []codes.Code{codes.OK, codes.NotFound, codes.FailedPrecondition}

// fuzzIDs turns the fuzzer's text into device IDs: comma-separated, with @0
// and @1 standing for the UUIDs of the harness's two cards (so seeds stay
// readable and valid whatever the simulated UUIDs are). "" is no IDs.
func fuzzIDs(s string, cards [2]podtest.Card) []string {
	if s == "" {
		return nil
	}
	s = strings.ReplaceAll(s, "@0", cards[0].UUID)
	s = strings.ReplaceAll(s, "@1", cards[1].UUID)
	return strings.Split(s, ",")
}

// advertisedUnits is the device list the plugin sends the kubelet in
// ListAndWatch: one ID per unit. (Read from the harness's inventory store,
// not by opening ListAndWatch: the plugin takes a closed ListAndWatch for
// a kubelet restart and serves a new socket.)
func advertisedUnits(h *harness) map[string]bool {
	out := map[string]bool{}
	for _, d := range h.store.Devices() {
		out[d.ID] = true
	}
	return out
}

// wellFormed reports whether ids are what the kubelet can send for one
// container: at least one, each an advertised unit, no unit twice, all of
// one card. It returns that card.
func wellFormed(ids []string, advertised map[string]bool) (string, bool) {
	if len(ids) == 0 {
		return "", false
	}
	card := ""
	seen := map[string]bool{}
	for _, id := range ids {
		c, _, err := api.ParseUnitID(id)
		if err != nil || !advertised[id] || seen[id] || (card != "" && c != card) {
			return "", false
		}
		seen[id] = true
		card = c
	}
	return card, true
}

// quietTB is the fuzz target's testing.F for the harness: the plugin logs
// from its own goroutines while inputs run, and testing.F forbids Log and
// Helper inside the fuzz function, so those are dropped; everything else
// (Fatal, Cleanup, TempDir…) is the F's.
type quietTB struct{ testing.TB }

func (quietTB) Helper()             {}
func (quietTB) Log(...any)          {}
func (quietTB) Logf(string, ...any) {}

// allParse reports whether each of ids (none is fine) parses as a
// unit ID (whatever its card and unit).
func allParse(ids []string) bool {
	for _, id := range ids {
		if _, _, err := api.ParseUnitID(id); err != nil {
			return false
		}
	}
	return true
}

// FuzzAllocate sends the kubelet's two calls, Allocate and
// GetPreferredAllocation, with arbitrary device IDs, must-include IDs,
// allocation sizes and numbers of container requests, over the plugin's
// real gRPC socket. The node has two 8-unit cards and three pending pods (3
// units assigned to card 1, 1 unit assigned to card 0, 2 units with no
// assignment). Whatever the input:
//   - no call panics (a panic in a gRPC handler ends the plugin);
//   - Allocate of IDs the plugin never advertised (malformed, unknown card,
//     unit out of range, a unit twice, units of two cards, none) fails with
//     notAdvertisedCodes; of advertised units of one card it answers with
//     matchCodes, and when it grants, every container gets that card and
//     exactly that many units;
//   - GetPreferredAllocation refuses IDs that do not parse as unit IDs, or a
//     negative size, with InvalidArgument, and otherwise never fails: a
//     preference is advice, and it answers each container request with
//     nothing, or with exactly the
//     requested number of distinct offered units of one card that include
//     every must-include unit.
func FuzzAllocate(f *testing.F) {
	h := newHarness(quietTB{f}, setup{pods: func(c [2]podtest.Card) []*corev1.Pod {
		return []*corev1.Pod{
			podtest.Bound(nodeName, "p", 1).GPU("c", 3).Assign(api.PhaseAssigned, c[1]).Obj(),
			podtest.Bound(nodeName, "q", 2).GPU("c", 1).Assign(api.PhaseAssigned, c[0]).Obj(),
			podtest.Bound(nodeName, "r", 3).GPU("c", 2).Obj(),
		}
	}})
	advertised := advertisedUnits(h)
	// Seeds, one per class of input (ids, must-include, container requests,
	// allocation size); testdata/fuzz/FuzzAllocate holds the crashers found.
	for _, s := range []struct {
		ids, must  string
		containers uint8
		size       int32
	}{
		{"@1::0,@1::1,@1::2", "", 1, 3},            // the pending 3-unit container, on its card
		{"@0::5,@0::6,@0::7", "", 1, 3},            // same size, the other card (a correction)
		{"@0::0", "", 1, 1},                        // the 1-unit container
		{"@0::0,@0::1", "", 1, 2},                  // the pod without an assignment
		{"@0::0,@0::1,@0::2,@0::3", "", 1, 4},      // no pending container of that size
		{"@1::0,@1::1,@1::2", "", 3, 3},            // several container requests in one call
		{"@1::0,@1::1,@1::2", "", 0, 3},            // no container request at all
		{"", "", 1, 0},                             // no IDs
		{"@0::0,@1::0", "", 1, 2},                  // units of two cards
		{"@0::0,@0::0", "", 1, 2},                  // one unit twice
		{"@0::8", "", 1, 1},                        // a unit beyond the card
		{"@0::01", "", 1, 1},                       // not the advertised spelling
		{"@0::+1", "", 1, 1},                       // not the advertised spelling
		{"@0::-1", "", 1, 1},                       // negative unit
		{"@0", "", 1, 1},                           // no unit number
		{"::3", "", 1, 1},                          // no card
		{"GPU-unknown::0", "", 1, 1},               // a card this plugin does not have
		{"@0::99999999999999999999", "", 1, 1},     // unit number overflows
		{"@0::1,@0::2,@0::3", "@0::1", 1, 3},       // must-include
		{"@0::1,@0::2,@1::3", "@0::1,@1::3", 1, 2}, // must-include spans cards
		{"@0::1,@0::2", "@0::1", 1, 1},             // must-include as large as the request
		{"@0::1,@0::2", "@0::1,@0::2", 1, 1},       // must-include larger than the request
		{"@0::1,@0::2", "@0::1,@0::1", 1, 2},       // must-include names a unit twice
		{"@0::1,@0::2", "", 1, -1},                 // negative allocation size
		{"@0::1,@0::1,@0::1", "", 1, 2},            // offered twice
		{"@0::1,x,@0::2", "", 1, 2},                // one malformed ID among good ones
	} {
		f.Add(s.ids, s.must, s.containers, s.size)
	}
	f.Fuzz(func(t *testing.T, idText, mustText string, containers uint8, size int32) {
		if !utf8.ValidString(idText) || !utf8.ValidString(mustText) {
			return // protobuf strings are UTF-8: no client can send these
		}
		ids, must := fuzzIDs(idText, h.cards), fuzzIDs(mustText, h.cards)
		n := int(containers % 5)
		ctx := context.Background()

		areq := &pluginapi.AllocateRequest{}
		for range n {
			areq.ContainerRequests = append(areq.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
		}
		resp, err := h.dp.Allocate(ctx, areq)
		code := status.Code(err)
		card, ok := wellFormed(ids, advertised)
		switch {
		case n == 0:
			if err != nil || len(resp.ContainerResponses) != 0 {
				t.Fatalf("Allocate with no container requests = %v, %v; want an empty answer", resp, err)
			}
		case !ok:
			if !slices.Contains(notAdvertisedCodes, code) {
				t.Fatalf("Allocate(%q) of IDs never advertised: code %v (%v), want one of %v", ids, code, err, notAdvertisedCodes)
			}
		case !slices.Contains(matchCodes, code):
			t.Fatalf("Allocate(%q): code %v (%v), want one of %v", ids, code, err, matchCodes)
		case err == nil:
			if len(resp.ContainerResponses) != n {
				t.Fatalf("Allocate(%q) for %d containers: %d answers", ids, n, len(resp.ContainerResponses))
			}
			for _, r := range resp.ContainerResponses {
				if got := r.Envs[api.EnvCardUUID]; got != card {
					t.Fatalf("Allocate(%q) gave card %q, want the IDs' card %q", ids, got, card)
				}
				if got := r.Envs[api.EnvMemoryUnits]; got != strconv.Itoa(len(ids)) {
					t.Fatalf("Allocate(%q) gave %s units, want %d", ids, got, len(ids))
				}
			}
		}

		preq := &pluginapi.PreferredAllocationRequest{}
		for range n {
			preq.ContainerRequests = append(preq.ContainerRequests, &pluginapi.ContainerPreferredAllocationRequest{
				AvailableDeviceIDs: ids, MustIncludeDeviceIDs: must, AllocationSize: size})
		}
		presp, err := h.dp.GetPreferredAllocation(ctx, preq)
		if n > 0 && (!allParse(ids) || !allParse(must) || size < 0) {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("GetPreferredAllocation(available %q, must %q, size %d) = %v, want InvalidArgument", ids, must, size, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("GetPreferredAllocation(available %q, must %q, size %d): %v", ids, must, size, err)
		}
		if len(presp.ContainerResponses) != n {
			t.Fatalf("GetPreferredAllocation for %d containers: %d answers", n, len(presp.ContainerResponses))
		}
		for _, r := range presp.ContainerResponses {
			got := r.DeviceIDs
			if len(got) == 0 {
				continue
			}
			if len(got) != int(size) {
				t.Fatalf("GetPreferredAllocation(available %q, must %q, size %d) = %q: wrong size", ids, must, size, got)
			}
			offered := map[string]bool{}
			for _, id := range append(slices.Clone(ids), must...) {
				offered[id] = true
			}
			seen := map[string]bool{}
			prefCard := ""
			for _, id := range got {
				c, _, perr := api.ParseUnitID(id)
				if perr != nil || !offered[id] || seen[id] || (prefCard != "" && c != prefCard) {
					t.Fatalf("GetPreferredAllocation(available %q, must %q, size %d) = %q: not distinct offered units of one card", ids, must, size, got)
				}
				seen[id] = true
				prefCard = c
			}
			for _, id := range must {
				if !seen[id] {
					t.Fatalf("GetPreferredAllocation(available %q, must %q, size %d) = %q: leaves out must-include %q", ids, must, size, got, id)
				}
			}
		}
	})
}
