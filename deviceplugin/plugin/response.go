package plugin

import (
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/api"
	"github.com/gpushare/gpushare/deviceplugin/nvml"
	"github.com/gpushare/gpushare/internal/oneof"
)

// Strategy is how a container is told which card it has.
type Strategy string

const (
	// StrategyVolumeMounts: NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices
	// and host /dev/null mounted at /var/run/nvidia-container-devices/<id>.
	StrategyVolumeMounts Strategy = "volume-mounts"
	// StrategyEnvvar: NVIDIA_VISIBLE_DEVICES=<id>.
	StrategyEnvvar Strategy = "envvar"
)

// ParseStrategy parses --pass-device-specs-strategy style names.
func ParseStrategy(s string) (Strategy, error) {
	return oneof.Parse("device list strategy", s, StrategyVolumeMounts, StrategyEnvvar)
}

// DeviceIDStrategy is what names the card inside the container.
type DeviceIDStrategy string

const (
	// DeviceIDUUID names the card by its UUID (stable across reboots).
	DeviceIDUUID DeviceIDStrategy = "uuid"
	// DeviceIDIndex names the card by its node-local index.
	DeviceIDIndex DeviceIDStrategy = "index"
)

// ParseDeviceIDStrategy parses "uuid" or "index".
func ParseDeviceIDStrategy(s string) (DeviceIDStrategy, error) {
	return oneof.Parse("device ID strategy", s, DeviceIDUUID, DeviceIDIndex)
}

// response is what the container gets for units of card (Config.Response).
func (p *Plugin) response(card nvml.Card, units int64) *pluginapi.ContainerAllocateResponse {
	return p.cfg.Response(card, units, p.store.Unit())
}

// Response is what a container gets for units (of unit) of card: the
// environment naming its grant and its card, how the card reaches it
// (Strategy, DeviceIDStrategy) and MPS's limit. It depends on the card and
// the count only, never on which container it is for: a wrong guess cannot
// give a container the wrong card. The DRA driver hands a claim the same
// edits through CDI (deviceplugin/dra).
func (c Config) Response(card nvml.Card, units int64, unit api.MemoryUnit) *pluginapi.ContainerAllocateResponse {
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		api.EnvMemoryUnits:   strconv.FormatInt(units, 10),
		api.EnvMemoryUnit:    string(unit),
		api.EnvMemoryMiB:     strconv.FormatInt(units*unit.MiB(), 10),
		api.EnvCardMemoryMiB: strconv.FormatInt(card.MemoryMiB, 10),
		api.EnvCardUUID:      card.UUID,
		api.EnvCardIndex:     strconv.Itoa(card.Index),
	}}
	for k, v := range c.Names.CompatEnv(card.Index, units, unit.UnitsFromMiB(card.MemoryMiB)) {
		r.Envs[k] = v
	}
	c.reach(r, card)
	c.MPS.addTo(r, units*unit.MiB())
	return r
}

// reach tells r how cards reach the container: their IDs
// (DeviceIDStrategy) in NVIDIA_VISIBLE_DEVICES, comma-separated, or one
// /dev/null mount per card under api.VisibleDevicesVolumeRoot (Strategy).
func (c Config) reach(r *pluginapi.ContainerAllocateResponse, cards ...nvml.Card) {
	var ids []string
	for _, card := range cards {
		id := card.UUID
		if c.DeviceIDStrategy == DeviceIDIndex {
			id = strconv.Itoa(card.Index)
		}
		ids = append(ids, id)
	}
	if c.Strategy == StrategyEnvvar {
		r.Envs[api.EnvNvidiaVisibleDevices] = strings.Join(ids, ",")
		return
	}
	r.Envs[api.EnvNvidiaVisibleDevices] = api.VisibleDevicesVolumeRoot
	for _, id := range ids {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: api.VisibleDevicesVolumeRoot + "/" + id, HostPath: "/dev/null", ReadOnly: true})
	}
}
