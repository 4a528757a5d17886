// Package response is what a container gets for its grant (the device plugin's Allocate answer,
// the DRA driver's CDI edits): the environment naming the grant and its cards, how the cards
// reach the container (Strategy, DeviceIDStrategy) and MPS's limit.
package response

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

// Config shapes the container response.
type Config struct {
	// Names are the resources served and the keys read and written (zero: api.DefaultNames).
	Names api.Names
	// Strategy and DeviceIDStrategy: how the cards reach the container
	// (zero: StrategyVolumeMounts, DeviceIDUUID).
	Strategy         Strategy
	DeviceIDStrategy DeviceIDStrategy
	// MPS adds NVIDIA MPS's per-client memory limit to every share (mps.go).
	MPS MPS
}

// Share is what a container gets for units (of unit) of card: the
// environment naming its grant and its card, how the card reaches it and
// MPS's limit. It depends on the card and the count only, never on which
// container it is for: a wrong guess cannot give a container the wrong card.
func (c Config) Share(card nvml.Card, units int64, unit api.MemoryUnit) *pluginapi.ContainerAllocateResponse {
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

// Whole is what a container given these cards whole gets: as for a share,
// the cards reach it by reach, and GPUSHARE_WHOLE_CARDS, GPUSHARE_CARD_UUID
// and GPUSHARE_CARD_INDEX with comma-separated lists. No MPS limit: the
// cards are the container's alone.
func (c Config) Whole(cards []nvml.Card) *pluginapi.ContainerAllocateResponse {
	var uuids, indexes []string
	for _, card := range cards {
		uuids = append(uuids, card.UUID)
		indexes = append(indexes, strconv.Itoa(card.Index))
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		api.EnvWholeCards: strconv.Itoa(len(cards)),
		api.EnvCardUUID:   strings.Join(uuids, ","),
		api.EnvCardIndex:  strings.Join(indexes, ","),
	}}
	c.reach(r, cards...)
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
