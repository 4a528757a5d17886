package api

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The decoders read what anyone with write access to a pod or node can put
// there: whatever they are given, they must not panic, and what they accept
// must be valid and survive a round trip through the encoder unchanged.

func FuzzDecodeAssignment(f *testing.F) {
	f.Add(`{"version":1,"podUID":"u","node":"n","unit":"GiB","phase":"Assigned","containers":[{"name":"c","cardUUID":"GPU-1","cardIndex":0,"units":10}]}`)
	f.Add(`{"version":1,"podUID":"u","node":"n","unit":"MiB","phase":"Allocated","containers":[{"name":"a","cardUUID":"GPU-1","cardIndex":3,"units":1},{"name":"b","cardUUID":"GPU-2","cardIndex":1,"units":9223372036854775807}]}`)
	f.Add(`{"version":2}`)
	f.Add(`{"containers":null}`)
	f.Add(`[]`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := DecodeAssignment(s)
		if err != nil {
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("decoded %q but it is invalid: %v", s, err)
		}
		enc, err := EncodeAssignment(a)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", s, err)
		}
		b, err := DecodeAssignment(enc)
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, b, err, a)
		}
	})
}

func FuzzDecodeInventory(f *testing.F) {
	f.Add(`{"version":1,"unit":"GiB","cards":[{"index":0,"uuid":"GPU-1","model":"H100","units":80,"state":"healthy"}]}`)
	f.Add(`{"version":1,"unit":"GiB","cards":[{"index":0,"uuid":"GPU-1","units":80,"state":"isolated"},{"index":0,"uuid":"GPU-1","units":80}]}`)
	f.Add(`{"cards":[{"units":-1}]}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := DecodeInventory(s)
		if err != nil {
			return
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("decoded %q but it is invalid: %v", s, err)
		}
		enc, err := EncodeInventory(inv)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", s, err)
		}
		back, err := DecodeInventory(enc)
		if err != nil || !reflect.DeepEqual(inv, back) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, back, err, inv)
		}
		if inv.TotalUnits() < 0 {
			t.Fatalf("inventory %q totals %d units", s, inv.TotalUnits())
		}
	})
}

func FuzzParseIsolation(f *testing.F) {
	for _, s := range []string{"", "0", "1,3", " 2 , GPU-77c0 ", "MIG-1,gpu-2", "-1", "card0", ",,", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		iso, err := ParseIsolation(s)
		if err != nil {
			return
		}
		back, err := ParseIsolation(iso.String())
		if err != nil || !reflect.DeepEqual(iso, back) {
			t.Fatalf("ParseIsolation(%q) = %+v renders %q, which parses to %+v, %v", s, iso, iso.String(), back, err)
		}
		for _, i := range iso.Index {
			if i < 0 {
				t.Fatalf("ParseIsolation(%q) accepted index %d", s, i)
			}
		}
	})
}

func FuzzParseIsolationFile(f *testing.F) {
	for _, s := range []string{`{"index":[1],"uuid":["GPU-1"]}`, `{}`, `{"index":[-1]}`, `{"cards":[1]}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		iso, err := ParseIsolationFile(b)
		if err != nil {
			return
		}
		for _, i := range iso.Index {
			if i < 0 {
				t.Fatalf("ParseIsolationFile(%q) accepted index %d", b, i)
			}
		}
	})
}

func FuzzParseUnitID(f *testing.F) {
	for _, s := range []string{"GPU-8a2f::7", "GPU-8a2f::", "::3", "GPU-1::-1", "a::b::2", "GPU-1::99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		uuid, n, err := ParseUnitID(id)
		if err != nil {
			return
		}
		if uuid == "" || n < 0 {
			t.Fatalf("ParseUnitID(%q) = %q, %d", id, uuid, n)
		}
		u2, n2, err := ParseUnitID(UnitID(uuid, n))
		if err != nil || u2 != uuid || n2 != n {
			t.Fatalf("UnitID(%q, %d) parses to %q, %d, %v", uuid, n, u2, n2, err)
		}
	})
}

// FuzzRequestFromPod puts arbitrary quantities in a pod's limits and
// requests: a pod is either refused with an error or asks for whole units
// between 1 and MaxUnits per requesting app container.
func FuzzRequestFromPod(f *testing.F) {
	for _, s := range [][3]string{{"10", "", ""}, {"0", "", ""}, {"500Mi", "", ""}, {"1.5", "", ""}, {"-3", "", ""}, {"", "4", ""}, {"2", "2", "1"}, {"100000", "", ""}, {"1e3", "", "2"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, limit, request, initLimit string) {
		pod := &corev1.Pod{}
		app := corev1.Container{Name: "app"}
		if q, err := resource.ParseQuantity(limit); err == nil {
			app.Resources.Limits = corev1.ResourceList{DefaultNames().ResourceName(): q}
		}
		if q, err := resource.ParseQuantity(request); err == nil {
			app.Resources.Requests = corev1.ResourceList{DefaultNames().ResourceName(): q}
		}
		pod.Spec.Containers = []corev1.Container{app, {Name: "plain"}}
		if q, err := resource.ParseQuantity(initLimit); err == nil {
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{DefaultNames().ResourceName(): q}}}}
		}
		req, err := DefaultNames().RequestFromPod(pod)
		if err != nil {
			return
		}
		if len(req.Containers) > 1 {
			t.Fatalf("%d requesting containers from one", len(req.Containers))
		}
		for _, c := range req.Containers {
			if c.Units < 1 || c.Units > MaxUnits {
				t.Fatalf("limit %q request %q: container asks for %d units", limit, request, c.Units)
			}
		}
	})
}
