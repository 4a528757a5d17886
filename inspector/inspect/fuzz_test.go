package inspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/api"
)

// knownWarnings are the stable warning codes (view.go).
var knownWarnings = map[WarningCode]bool{
	WarnNoInventory: true, WarnInvalidInventory: true, WarnNoCapacity: true, WarnNoCards: true,
	WarnCapacityMismatch: true, WarnAllocatableMismatch: true, WarnInvalidIsolation: true,
	WarnOvercommitted: true, WarnTerminatingOverlap: true, WarnMalformedAssignment: true, WarnNoAssignment: true,
	WarnUnknownCard: true, WarnUnitMismatch: true, WarnNodeUnusable: true,
}

// Which annotations and status fields a FuzzViewOfMalformedAnnotations
// input sets (bits of its "present" argument).
const (
	hasInventory = 1 << iota
	hasIsolation
	hasAssignment
	hasCapacity
)

// FuzzViewOfMalformedAnnotations builds the inspector's view of one GPU node
// whose inventory annotation, isolation annotation and gpu-mem capacity, and
// of one pod whose assignment annotation, are arbitrary text (each present
// or not), next to a pod with a valid record for the node's first card.
// Whatever they hold:
//   - Build and every printer (table, details, JSON, YAML) finish without a
//     panic or an error, and the JSON decodes back into the same View;
//   - every slice is non-nil, a node's figures are the sums of its cards'
//     and a card's allocation the sum of its pods';
//   - a node whose inventory is unreadable has no unit, no cards, an
//     InventoryError and a NoInventory or InvalidInventory warning, and a
//     node has a unit exactly when its inventory was read;
//   - the fuzzed pod's memory is never lost silently: the pod is on a card
//     or listed as Uncounted on its node with a warning; a record that does
//     not decode, validate or match the pod puts it on no card at all;
//   - every warning code is one of the documented ones.
func FuzzViewOfMalformedAnnotations(f *testing.F) {
	validInv := makeNode(f, "n1", "").rawInventory(api.UnitGiB, gpu("n1", 0, a100, 40), gpu("n1", 1, a100, 40)).obj().Annotations[api.DefaultNames().AnnotationInventory()]
	valid := runningPod("ns", "p").GPU("c", 4).AssignOn("n1", api.PhaseAllocated, 1).Obj().Annotations[api.DefaultNames().AnnotationAssignment()]
	all := uint8(hasInventory | hasIsolation | hasAssignment | hasCapacity)
	for _, s := range []struct {
		inv, iso, assign, capacity string
		present                    uint8
	}{
		{validInv, "", valid, "80", all &^ hasIsolation},                                               // everything well formed
		{validInv, "1", valid, "80", all},                                                              // card 1 isolated by annotation
		{validInv, "GPU-n1-0,5", valid, "80", all},                                                     // isolation by UUID and a card that does not exist
		{validInv, "1,,x", valid, "80", all},                                                           // malformed isolation
		{"", "", valid, "80", all &^ hasInventory &^ hasIsolation},                                     // no inventory
		{"{not json", "", valid, "80", all &^ hasIsolation},                                            // inventory does not decode
		{`{"version":7}`, "", valid, "80", all &^ hasIsolation},                                        // unknown version
		{strings.Replace(validInv, `"GiB"`, `"TiB"`, 1), "", valid, "80", all &^ hasIsolation},         // unknown unit
		{strings.Replace(validInv, `"index":1`, `"index":0`, 1), "", valid, "80", all &^ hasIsolation}, // two cards with one index
		{strings.Replace(validInv, `"units":40`, `"units":-40`, 1), "", valid, "80", all &^ hasIsolation},
		{strings.Replace(validInv, `"units":40`, `"units":99999999999999999999`, 1), "", valid, "80", all &^ hasIsolation},
		{strings.Replace(validInv, `"state":"Healthy"`, `"state":"Melting"`, 1), "", valid, "80", all &^ hasIsolation},
		{strings.Replace(validInv, "GPU-n1-1", "GPU-n1-0", 1), "", valid, "80", all &^ hasIsolation},   // two cards with one UUID
		{validInv, "", "", "80", all &^ hasIsolation &^ hasAssignment},                                 // no record
		{validInv, "", "{not json", "80", all &^ hasIsolation},                                         // record does not decode
		{validInv, "", strings.Replace(valid, "GPU-n1-1", "GPU-n1-9", 1), "80", all &^ hasIsolation},   // unknown card
		{validInv, "", strings.Replace(valid, `"units":4`, `"units":5`, 1), "80", all &^ hasIsolation}, // record does not match the request
		{validInv, "", strings.Replace(valid, `"units":4`, `"units":-4`, 1), "80", all &^ hasIsolation},
		{validInv, "", strings.Replace(valid, `"GiB"`, `"MiB"`, 1), "80", all &^ hasIsolation},             // unit mismatch
		{validInv, "", strings.Replace(valid, "uid-ns-p", "uid-ns-other", 1), "80", all &^ hasIsolation},   // another pod's record
		{validInv, "", strings.Replace(valid, `"node":"n1"`, `"node":"n2"`, 1), "80", all &^ hasIsolation}, // another node's record
		{validInv, "", valid, "-5", all &^ hasIsolation},                                                   // negative capacity
		{validInv, "", valid, "1e30", all &^ hasIsolation},                                                 // capacity beyond int64
		{validInv, "", valid, "500Mi", all &^ hasIsolation},
		{validInv, "", valid, "79", all &^ hasIsolation}, // capacity disagrees with the inventory
	} {
		f.Add(s.inv, s.iso, s.assign, s.capacity, s.present)
	}
	okPod := runningPod("ns", "ok").GPU("c", 2).AssignOn("n1", api.PhaseAllocated, 0).Obj()

	f.Fuzz(func(t *testing.T, inv, iso, assign, capacity string, present uint8) {
		node := makeNode(t, "n1", "10.0.0.1").label(api.LabelEnabled, "true")
		if present&hasInventory != 0 {
			node.annotate(api.DefaultNames().AnnotationInventory(), inv)
		}
		if present&hasIsolation != 0 {
			node.annotate(api.DefaultNames().AnnotationIsolation(), iso)
		}
		n := node.obj()
		if q, err := resource.ParseQuantity(capacity); err == nil && present&hasCapacity != 0 {
			n.Status.Capacity = corev1.ResourceList{api.DefaultNames().ResourceName(): q}
			n.Status.Allocatable = corev1.ResourceList{api.DefaultNames().ResourceName(): q}
		}
		pb := runningPod("ns", "p").GPU("c", 4).Node("n1")
		if present&hasAssignment != 0 {
			pb.Annotation(api.DefaultNames().AnnotationAssignment(), assign)
		}
		pod := pb.Obj()

		v := Build(api.DefaultNames(), Cluster{Nodes: []corev1.Node{*n}, Pods: []corev1.Pod{*pod, *okPod}})

		for name, print := range map[string]func(*bytes.Buffer) error{
			"table":          func(b *bytes.Buffer) error { return PrintTable(b, api.DefaultNames(), v, false) },
			"table one node": func(b *bytes.Buffer) error { return PrintTable(b, api.DefaultNames(), v, true) },
			"details":        func(b *bytes.Buffer) error { return PrintDetails(b, api.DefaultNames(), v, false) },
			"yaml":           func(b *bytes.Buffer) error { return PrintYAML(b, v) },
		} {
			if err := print(&bytes.Buffer{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		var js bytes.Buffer
		if err := PrintJSON(&js, v); err != nil {
			t.Fatalf("json: %v", err)
		}
		var back View
		if err := json.Unmarshal(js.Bytes(), &back); err != nil {
			t.Fatalf("the JSON view does not decode: %v\n%s", err, js.String())
		}
		// JSON carries strings as UTF-8: compare only when the input was.
		if utf8.ValidString(inv + iso + assign) {
			if diff := cmp.Diff(v, back); diff != "" {
				t.Fatalf("the JSON view decodes to another View (-built +decoded):\n%s", diff)
			}
		}

		if v.Nodes == nil || v.Totals == nil || v.Warnings == nil || len(v.Nodes) != 1 {
			t.Fatalf("view %+v: want one node and non-nil slices", v)
		}
		for _, w := range v.Warnings {
			if !knownWarnings[w.Code] || w.Message == "" {
				t.Fatalf("warning %+v: unknown code or no message", w)
			}
		}
		nv := v.Nodes[0]
		if nv.Cards == nil || nv.Uncounted == nil {
			t.Fatalf("node %+v: nil slices", nv)
		}
		var alloc, total int64
		onCard := false
		for _, c := range nv.Cards {
			if c.Pods == nil {
				t.Fatalf("card %+v: nil pods", c)
			}
			var sum int64
			for _, p := range c.Pods {
				sum += p.Units
				onCard = onCard || p.Name == "p"
			}
			if sum != c.Allocated {
				t.Fatalf("card %d: allocated %d, its pods hold %d", c.Index, c.Allocated, sum)
			}
			alloc += c.Allocated
			total += c.Total
		}
		if alloc != nv.Allocated || total != nv.Total {
			t.Fatalf("node: %d/%d, its cards sum to %d/%d", nv.Allocated, nv.Total, alloc, total)
		}

		_, invErr := api.DefaultNames().InventoryFromNode(n)
		if (invErr == nil) != (nv.Unit != "") || (invErr == nil) != (nv.InventoryError == "") {
			t.Fatalf("inventory error %v, node unit %q, InventoryError %q: disagree", invErr, nv.Unit, nv.InventoryError)
		}
		if invErr != nil {
			if len(nv.Cards) != 0 || !hasWarning(v, "", WarnNoInventory, WarnInvalidInventory) {
				t.Fatalf("unreadable inventory (%v): cards %v, warnings %v", invErr, nv.Cards, v.Warnings)
			}
		}

		uncounted := false
		for _, u := range nv.Uncounted {
			uncounted = uncounted || u.Name == "p"
		}
		if !onCard && !(uncounted && hasWarning(v, "ns/p")) {
			t.Fatalf("pod p is on no card and not reported: uncounted %v, warnings %v", nv.Uncounted, v.Warnings)
		}
		if _, err := api.DefaultNames().AssignmentFromPod(pod); err != nil && onCard {
			t.Fatalf("pod p's record is refused (%v) but it is counted on a card", err)
		} else if err != nil && !errors.Is(err, api.ErrNoAssignment) && !hasWarning(v, "ns/p", WarnMalformedAssignment) {
			t.Fatalf("pod p's record is refused (%v) without a MalformedAssignment warning: %v", err, v.Warnings)
		}
	})
}

// hasWarning reports whether v has a warning about pod (any pod when "")
// with one of codes (any code when none).
func hasWarning(v View, pod string, codes ...WarningCode) bool {
	for _, w := range v.Warnings {
		if pod != "" && w.Pod != pod {
			continue
		}
		if len(codes) == 0 {
			return true
		}
		for _, c := range codes {
			if w.Code == c {
				return true
			}
		}
	}
	return false
}
