package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// container builds a container whose limits (and, with req, requests) hold q of DefaultNames().ResourceName().
func container(name, limit, request string) corev1.Container {
	c := corev1.Container{Name: name}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{DefaultNames().ResourceName(): resource.MustParse(limit)}
	}
	if request != "" {
		c.Resources.Requests = corev1.ResourceList{DefaultNames().ResourceName(): resource.MustParse(request)}
	}
	return c
}

func TestRequestFromPod(t *testing.T) {
	tests := []struct {
		name    string
		init    []corev1.Container
		app     []corev1.Container
		want    []ContainerRequest
		wantErr error
		errText string
	}{
		{name: "a pod without the resource asks for nothing", app: []corev1.Container{{Name: "web"}}},
		{name: "limits give the units", app: []corev1.Container{container("c", "10", "")}, want: []ContainerRequest{{"c", 10}}},
		{name: "requests alone are used when no limit is set", app: []corev1.Container{container("c", "", "7")}, want: []ContainerRequest{{"c", 7}}},
		{
			name: "containers keep spec order and those asking nothing are left out",
			app:  []corev1.Container{container("b", "3", ""), {Name: "sidecar"}, container("a", "5", "5")},
			want: []ContainerRequest{{"b", 3}, {"a", 5}},
		},
		{name: "an init container asking for memory makes the pod invalid", init: []corev1.Container{container("warm", "2", "")}, app: []corev1.Container{container("c", "4", "")}, wantErr: ErrInitContainerRequest, errText: `init container "warm"`},
		{name: "an init container without the resource is fine", init: []corev1.Container{{Name: "setup"}}, app: []corev1.Container{container("c", "4", "")}, want: []ContainerRequest{{"c", 4}}},
		{name: "an explicit zero is an error that says how to ask for no GPU", app: []corev1.Container{container("c", "0", "")}, wantErr: ErrInvalidRequest, errText: "leave example.com/gpu-mem out"},
		{name: "a negative quantity is an error", app: []corev1.Container{container("c", "-2", "")}, wantErr: ErrInvalidRequest, errText: "negative"},
		{name: "a fractional quantity is an error", app: []corev1.Container{container("c", "500m", "")}, wantErr: ErrInvalidRequest, errText: "whole number"},
		{name: "more than MaxUnits is an error", app: []corev1.Container{container("c", "2Ti", "")}, wantErr: ErrInvalidRequest, errText: "maximum"},
		{name: "an absurd quantity beyond int64 is an error", app: []corev1.Container{container("c", "100E", "")}, wantErr: ErrInvalidRequest, errText: "maximum"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.app}}
			got, err := DefaultNames().RequestFromPod(pod)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got.Containers); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := DefaultNames().RequestFromPod(nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("nil pod: err = %v, want ErrInvalidRequest", err)
	}
}

func TestMemoryUnitArithmetic(t *testing.T) {
	tests := []struct {
		name string
		unit MemoryUnit
		mib  int64
		want int64
	}{
		{"an H100 80GB (81,559 MiB) offers 79 GiB units", UnitGiB, 81559, 79},
		{"exactly 40 GiB is 40 units", UnitGiB, 40960, 40},
		{"less than one GiB offers nothing", UnitGiB, 1023, 0},
		{"MiB units are the MiB count", UnitMiB, 81559, 81559},
		{"negative memory offers nothing", UnitGiB, -5, 0},
		{"an unknown unit offers nothing", MemoryUnit("KiB"), 4096, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.unit.UnitsFromMiB(tc.mib); got != tc.want {
				t.Errorf("UnitsFromMiB(%d) = %d, want %d", tc.mib, got, tc.want)
			}
		})
	}
	if _, err := ParseMemoryUnit("GB"); err == nil || !strings.Contains(err.Error(), `"GiB" or "MiB"`) {
		t.Errorf("ParseMemoryUnit(GB) err = %v, want a message listing the units", err)
	}
}

func TestConvertUnitsRoundsAsNamed(t *testing.T) {
	tests := []struct {
		name     string
		n        int64
		from, to MemoryUnit
		up, down int64
	}{
		{"1536 MiB is 2 GiB held, 1 GiB that fits", 1536, UnitMiB, UnitGiB, 2, 1},
		{"a whole GiB count converts exactly", 2048, UnitMiB, UnitGiB, 2, 2},
		{"less than a GiB: 1 held, none that fits", 1, UnitMiB, UnitGiB, 1, 0},
		{"GiB to MiB is exact", 3, UnitGiB, UnitMiB, 3072, 3072},
		{"the same unit is unchanged", 7, UnitGiB, UnitGiB, 7, 7},
		{"a record without a unit is unchanged", 5, "", UnitMiB, 5, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ConvertUnitsUp(tc.n, tc.from, tc.to); got != tc.up {
				t.Errorf("ConvertUnitsUp(%d %s → %s) = %d, want %d", tc.n, tc.from, tc.to, got, tc.up)
			}
			if got := ConvertUnitsDown(tc.n, tc.from, tc.to); got != tc.down {
				t.Errorf("ConvertUnitsDown(%d %s → %s) = %d, want %d", tc.n, tc.from, tc.to, got, tc.down)
			}
		})
	}
}

func goodInventory() Inventory {
	return Inventory{Version: InventoryVersion, Unit: UnitGiB, Cards: []Card{
		{Index: 0, UUID: "GPU-a", Model: "A100", MemoryMiB: 40960, Units: 40, State: CardHealthy},
		{Index: 1, UUID: "GPU-b", Model: "A100", MemoryMiB: 40960, Units: 40, State: CardUnhealthy, Reason: "XID 79"},
	}}
}

func TestInventoryEncodeDecode(t *testing.T) {
	s, err := EncodeInventory(goodInventory())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(goodInventory(), got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got.TotalUnits() != 80 {
		t.Errorf("TotalUnits = %d, want 80", got.TotalUnits())
	}
	if c, ok := got.CardByUUID("GPU-b"); !ok || c.Index != 1 || c.Schedulable() {
		t.Errorf("CardByUUID(GPU-b) = %+v, %v; want the unhealthy card 1", c, ok)
	}

	bad := []struct {
		name   string
		mutate func(*Inventory)
		text   string
	}{
		{"a newer version is refused", func(i *Inventory) { i.Version = 2 }, "version 2"},
		{"an unknown unit is refused", func(i *Inventory) { i.Unit = "KiB" }, "unknown memory unit"},
		{"a duplicate index is refused", func(i *Inventory) { i.Cards[1].Index = 0 }, "index 0 appears twice"},
		{"a duplicate UUID is refused", func(i *Inventory) { i.Cards[1].UUID = "GPU-a" }, "appears twice"},
		{"a card without UUID is refused", func(i *Inventory) { i.Cards[0].UUID = "" }, "no UUID"},
		{"negative units are refused", func(i *Inventory) { i.Cards[0].Units = -1 }, "units"},
		{"an unknown state is refused", func(i *Inventory) { i.Cards[0].State = "broken" }, "unknown state"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			inv := goodInventory()
			tc.mutate(&inv)
			if _, err := EncodeInventory(inv); !errors.Is(err, ErrInvalidInventory) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("Encode err = %v, want ErrInvalidInventory containing %q", err, tc.text)
			}
		})
	}
	if _, err := DecodeInventory("{not json"); !errors.Is(err, ErrInvalidInventory) {
		t.Errorf("malformed JSON: err = %v", err)
	}
}

func TestInventoryFromNode(t *testing.T) {
	s, _ := EncodeInventory(goodInventory())
	node := func(ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: ann}}
	}
	if _, err := DefaultNames().InventoryFromNode(node(nil)); !errors.Is(err, ErrNoInventory) || !strings.Contains(err.Error(), "n1") {
		t.Errorf("no annotation: err = %v, want ErrNoInventory naming the node", err)
	}
	if _, err := DefaultNames().InventoryFromNode(node(map[string]string{DefaultNames().AnnotationInventory(): `{"version":1}`})); !errors.Is(err, ErrInvalidInventory) {
		t.Errorf("invalid annotation: err = %v, want ErrInvalidInventory", err)
	}
	if inv, err := DefaultNames().InventoryFromNode(node(map[string]string{DefaultNames().AnnotationInventory(): s})); err != nil || len(inv.Cards) != 2 {
		t.Errorf("good annotation: %v, %v", inv, err)
	}
}

// assignedPod is a pod bound to n1 with two containers asking 10 and 6 units, and its matching assignment.
func assignedPod() (*corev1.Pod, Assignment) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{container("a", "10", ""), container("b", "6", "")}},
	}
	a := Assignment{Version: AssignmentVersion, PodUID: "uid-1", Node: "n1", Unit: UnitGiB, Phase: PhaseAssigned, Containers: []ContainerAssignment{
		{Name: "a", CardUUID: "GPU-a", CardIndex: 0, Units: 10},
		{Name: "b", CardUUID: "GPU-b", CardIndex: 1, Units: 6},
	}}
	return pod, a
}

func TestAssignmentTrust(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*corev1.Pod, *Assignment)
		wantErr error
		text    string
	}{
		{name: "a record written for this pod is believed"},
		{name: "a record copied from another pod (other UID) is not believed", mutate: func(p *corev1.Pod, a *Assignment) { p.UID = "uid-2" }, wantErr: ErrInvalidAssignment, text: "pod UID"},
		{name: "a record for another node is not believed", mutate: func(p *corev1.Pod, a *Assignment) { p.Spec.NodeName = "n2" }, wantErr: ErrInvalidAssignment, text: `bound to "n2"`},
		{name: "a record of an unbound pod is checked against its containers only", mutate: func(p *corev1.Pod, a *Assignment) { p.Spec.NodeName = "" }},
		{name: "a record granting other units than requested is not believed", mutate: func(p *corev1.Pod, a *Assignment) { a.Containers[1].Units = 5 }, wantErr: ErrInvalidAssignment, text: "requests 6 units, the record grants 5"},
		{name: "a record missing a requesting container is not believed", mutate: func(p *corev1.Pod, a *Assignment) { a.Containers = a.Containers[:1] }, wantErr: ErrInvalidAssignment, text: "2 containers request"},
		{name: "a record naming a container that requests nothing is not believed", mutate: func(p *corev1.Pod, a *Assignment) { a.Containers[1].Name = "c" }, wantErr: ErrInvalidAssignment, text: `container "b" requests`},
		{name: "a record with a container twice is invalid", mutate: func(p *corev1.Pod, a *Assignment) { a.Containers[1].Name = "a" }, wantErr: ErrInvalidAssignment, text: "appears twice"},
		{name: "an unknown phase is invalid", mutate: func(p *corev1.Pod, a *Assignment) { a.Phase = "Done" }, wantErr: ErrInvalidAssignment, text: "unknown phase"},
		{name: "a newer version is invalid", mutate: func(p *corev1.Pod, a *Assignment) { a.Version = 2 }, wantErr: ErrInvalidAssignment, text: "version 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, a := assignedPod()
			if tc.mutate != nil {
				tc.mutate(pod, &a)
			}
			// Encode without validation so that invalid records reach the decoder as a
			// forged or corrupted annotation would.
			raw, err := jsonString(a)
			if err != nil {
				t.Fatal(err)
			}
			pod.Annotations = map[string]string{DefaultNames().AnnotationAssignment(): raw}
			got, err := DefaultNames().AssignmentFromPod(pod)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.text)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(a, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			if got.Total() != 16 {
				t.Errorf("Total = %d, want 16", got.Total())
			}
		})
	}
	pod, _ := assignedPod()
	if _, err := DefaultNames().AssignmentFromPod(pod); !errors.Is(err, ErrNoAssignment) {
		t.Errorf("no annotation: err = %v, want ErrNoAssignment", err)
	}
	if _, err := EncodeAssignment(Assignment{}); !errors.Is(err, ErrInvalidAssignment) {
		t.Errorf("Encode of an empty record: err = %v, want ErrInvalidAssignment", err)
	}
}

func TestIsolation(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Isolation
		wantErr string
	}{
		{name: "empty isolates nothing", in: "", want: Isolation{}},
		{name: "indexes and UUIDs, blanks ignored, sorted and deduplicated", in: " 3, GPU-bb ,0,3,,GPU-aa", want: Isolation{Index: []int{0, 3}, UUID: []string{"GPU-aa", "GPU-bb"}}},
		{name: "MIG UUIDs are accepted", in: "MIG-1234", want: Isolation{UUID: []string{"MIG-1234"}}},
		{name: "a negative index is refused", in: "-1", wantErr: "negative"},
		{name: "a word that is neither index nor UUID is refused", in: "0,card1", wantErr: `"card1" is neither`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseIsolation(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	iso, _ := ParseIsolation("1,GPU-Abc")
	for _, c := range []struct {
		index int
		uuid  string
		want  bool
	}{{1, "GPU-x", true}, {2, "gpu-abc", true}, {2, "GPU-x", false}} {
		if got := iso.Isolates(c.index, c.uuid); got != c.want {
			t.Errorf("Isolates(%d, %s) = %v, want %v", c.index, c.uuid, got, c.want)
		}
	}
	if got := iso.Union(Isolation{Index: []int{0, 1}}).String(); got != "0,1,GPU-Abc" {
		t.Errorf("Union().String() = %q", got)
	}
	if f, err := ParseIsolationFile([]byte(`{"index":[2],"uuid":["GPU-z"]}`)); err != nil || !f.Isolates(2, "") || !f.Isolates(9, "GPU-z") {
		t.Errorf("ParseIsolationFile = %+v, %v", f, err)
	}
	if _, err := ParseIsolationFile([]byte(`{"indexes":[2]}`)); err == nil || !strings.Contains(err.Error(), "want {") {
		t.Errorf("unknown field: err = %v, want a message showing the format", err)
	}
}

func TestUnitID(t *testing.T) {
	id := UnitID("GPU-8a2f-77", 12)
	if id != "GPU-8a2f-77::12" {
		t.Fatalf("UnitID = %q", id)
	}
	uuid, n, err := ParseUnitID(id)
	if err != nil || uuid != "GPU-8a2f-77" || n != 12 {
		t.Errorf("ParseUnitID = %q, %d, %v", uuid, n, err)
	}
	for _, bad := range []string{"GPU-x", "::3", "GPU-x::", "GPU-x::-1", "GPU-x::a"} {
		if _, _, err := ParseUnitID(bad); err == nil {
			t.Errorf("ParseUnitID(%q) accepted", bad)
		}
	}
}

func TestSanitizeLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":  "NVIDIA-H100-80GB-HBM3",
		" (A100) ":               "A100",
		strings.Repeat("x", 70):  strings.Repeat("x", 63),
		"Tesla V100-SXM2-32GB_a": "Tesla-V100-SXM2-32GB_a",
	} {
		if got := SanitizeLabelValue(in); got != want {
			t.Errorf("SanitizeLabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
