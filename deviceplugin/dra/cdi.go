package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI (Container Device Interface) specs: one file per prepared claim in
// the CDI directory, which the container runtime reads when the kubelet
// names the claim's CDI devices.

// DefaultCDIDir is where container runtimes look for CDI specs written at
// run time.
const DefaultCDIDir = "/var/run/cdi"

// editsOf turns the device plugin's container response into CDI edits:
// the same environment and bind mounts.
func editsOf(r *pluginapi.ContainerAllocateResponse) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	for k, v := range r.Envs {
		e.Env = append(e.Env, k+"="+v)
	}
	sort.Strings(e.Env)
	for _, m := range r.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts})
	}
	return e
}

// specFile is the claim's spec file of CDI kind (api.Names.CDIClaimKind):
// <vendor>-claim_<uid>.json (one file per claim, so that unpreparing removes
// exactly it).
func specFile(dir, kind string, claim types.UID) string {
	return filepath.Join(dir, strings.ReplaceAll(kind, "/", "-")+"_"+string(claim)+".json")
}

// writeSpec writes the claim's devices atomically (a temporary file renamed
// into place: a runtime never reads half a spec).
func writeSpec(dir, kind string, claim types.UID, devices []cdispec.Device) error {
	spec := &cdispec.Spec{Kind: kind, Devices: devices}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	spec.Version = version
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI directory: %w", err)
	}
	name := specFile(dir, kind, claim)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(name))
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// removeSpec removes the claim's spec file; a missing one is not an error
// (unpreparing is idempotent).
func removeSpec(dir, kind string, claim types.UID) error {
	if err := os.Remove(specFile(dir, kind, claim)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the claim's CDI spec: %w", err)
	}
	return nil
}
