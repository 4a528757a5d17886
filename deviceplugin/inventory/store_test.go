package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
)

const (
	uuid0 = "GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
	uuid1 = "GPU-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
)

// mixed is a node with an 80 GiB and a 40 GiB card (sizes as NVML reports them).
var mixed = []nvml.Card{
	{Index: 1, UUID: uuid1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960},
	{Index: 0, UUID: uuid0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
}

func states(inv api.Inventory) []string {
	var out []string
	for _, c := range inv.Cards {
		out = append(out, string(c.State)+":"+c.Reason)
	}
	return out
}

func TestInventoryUnitsPerCard(t *testing.T) {
	tests := []struct {
		unit api.MemoryUnit
		want []int64
	}{
		{api.UnitGiB, []int64{79, 40}}, // floor(81559/1024) = 79
		{api.UnitMiB, []int64{81559, 40960}},
	}
	for _, tt := range tests {
		t.Run(string(tt.unit), func(t *testing.T) {
			s, err := New(tt.unit, mixed)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, c := range s.Inventory().Cards {
				got = append(got, c.Units)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("units by index (-want +got):\n%s", diff)
			}
			if n := int64(len(s.Devices())); n != tt.want[0]+tt.want[1] {
				t.Errorf("%d devices, want %d", n, tt.want[0]+tt.want[1])
			}
		})
	}
}

func TestStateChanges(t *testing.T) {
	s, err := New(api.UnitGiB, mixed)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name        string
		change      func() bool
		wantChanged bool
		want        []string
	}{
		{"an XID makes a card unhealthy", func() bool { return s.SetUnhealthy(uuid1, "XID 79") }, true, []string{"healthy:", "unhealthy:XID 79"}},
		{"the same XID again changes nothing", func() bool { return s.SetUnhealthy(uuid1, "XID 79") }, false, []string{"healthy:", "unhealthy:XID 79"}},
		{"the file isolates the unhealthy card by index: isolated wins", func() bool { return s.SetIsolation(SourceFile, api.Isolation{Index: []int{1}}) }, true, []string{"healthy:", "isolated:isolated by the operator (file)"}},
		{"the annotation isolates card 0 by UUID", func() bool { return s.SetIsolation(SourceAnnotation, api.Isolation{UUID: []string{uuid0}}) }, true, []string{"isolated:isolated by the operator (annotation)", "isolated:isolated by the operator (file)"}},
		{"lifting the file shows the health failure again", func() bool { return s.SetIsolation(SourceFile, api.Isolation{}) }, true, []string{"isolated:isolated by the operator (annotation)", "unhealthy:XID 79"}},
		{"recovery and lifting the annotation bring both back", func() bool {
			return s.SetHealthy(uuid1) && s.SetIsolation(SourceAnnotation, api.Isolation{})
		}, true, []string{"healthy:", "healthy:"}},
		{"an event for every card", func() bool { return s.SetUnhealthy("", "NVML: GPU is lost") }, true, []string{"unhealthy:NVML: GPU is lost", "unhealthy:NVML: GPU is lost"}},
	}
	for _, st := range steps {
		before := s.Changed()
		if got := st.change(); got != st.wantChanged {
			t.Errorf("%s: changed = %v, want %v", st.name, got, st.wantChanged)
		}
		select {
		case <-before:
			if !st.wantChanged {
				t.Errorf("%s: watchers were notified of no change", st.name)
			}
		default:
			if st.wantChanged {
				t.Errorf("%s: watchers were not notified", st.name)
			}
		}
		if diff := cmp.Diff(st.want, states(s.Inventory())); diff != "" {
			t.Errorf("%s: states (-want +got):\n%s", st.name, diff)
		}
		if _, err := api.EncodeInventory(s.Inventory()); err != nil {
			t.Errorf("%s: inventory does not encode: %v", st.name, err)
		}
	}
}

func TestDevicesFollowState(t *testing.T) {
	s, _ := New(api.UnitGiB, []nvml.Card{{Index: 0, UUID: uuid0, MemoryMiB: 2048}, {Index: 1, UUID: uuid1, MemoryMiB: 1024}})
	s.SetIsolation(SourceAnnotation, api.Isolation{Index: []int{1}})
	want := []*pluginapi.Device{
		{ID: uuid0 + "::0", Health: pluginapi.Healthy},
		{ID: uuid0 + "::1", Health: pluginapi.Healthy},
		{ID: uuid1 + "::0", Health: pluginapi.Unhealthy},
	}
	got := s.Devices()
	if len(got) != len(want) {
		t.Fatalf("%d devices, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Health != want[i].Health {
			t.Errorf("device %d = %s %s, want %s %s", i, got[i].ID, got[i].Health, want[i].ID, want[i].Health)
		}
	}
}

func TestListAndWatchBytesIsTheEncodedSize(t *testing.T) {
	// Worst case: every device Unhealthy; unit numbers from 1 to 5 digits.
	cards := []nvml.Card{{Index: 0, UUID: uuid0, MemoryMiB: 12345}, {Index: 1, UUID: uuid1, MemoryMiB: 7}}
	s, err := New(api.UnitMiB, cards)
	if err != nil {
		t.Fatal(err)
	}
	s.SetUnhealthy("", "XID 79")
	buf, err := encoding.GetCodecV2("proto").Marshal(&pluginapi.ListAndWatchResponse{Devices: s.Devices()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ListAndWatchBytes(api.UnitMiB, cards), int64(buf.Len()); got != want {
		t.Errorf("ListAndWatchBytes = %d, encoded message is %d bytes", got, want)
	}
}

func TestCheckMessageSize(t *testing.T) {
	dgxa100 := make([]nvml.Card, 8)
	for i := range dgxa100 {
		dgxa100[i] = nvml.Card{Index: i, UUID: uuid0[:len(uuid0)-1] + string(rune('0'+i)), MemoryMiB: 40960}
	}
	if err := CheckMessageSize(api.UnitGiB, dgxa100); err != nil {
		t.Errorf("GiB units on 8x40GiB refused: %v", err)
	}
	err := CheckMessageSize(api.UnitMiB, dgxa100)
	if err == nil || !strings.Contains(err.Error(), "over the kubelet's limit") || !strings.Contains(err.Error(), "327680 devices") {
		t.Errorf("MiB units on 8x40GiB: err = %v, want a refusal naming the device count and the limit", err)
	}
	if b := ListAndWatchBytes(api.UnitMiB, dgxa100[:1]); b > MaxMessageBytes {
		t.Errorf("one 40 GiB card in MiB units is %d bytes, should fit the limit", b)
	}
}
