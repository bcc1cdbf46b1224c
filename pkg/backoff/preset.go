package backoff

import (
	"fmt"
	"strings"
	"time"
)

// PresetNames lists the names Preset accepts.
func PresetNames() []string {
	return []string{"kubevirt", "kubelet", "kubelet-reduced", "systemd"}
}

// Preset returns the named policy: "kubevirt" (the default), "kubelet",
// "kubelet-reduced" or "systemd". See the package documentation.
func Preset(name string) (Policy, error) {
	switch name {
	case "kubevirt":
		return Policy{Curve: KubeVirt{}}, nil
	case "kubelet":
		return Policy{
			Curve:                      Exponential{Initial: 10 * time.Second, Max: 300 * time.Second, Factor: 2},
			CountRunningFailuresWithin: 10 * time.Minute,
		}, nil
	case "kubelet-reduced":
		return Policy{
			Curve:                      Exponential{Initial: time.Second, Max: 60 * time.Second, Factor: 2},
			CountRunningFailuresWithin: time.Minute,
		}, nil
	case "systemd":
		return Policy{Curve: Steps{Initial: time.Second, Max: 300 * time.Second, Steps: 5}}, nil
	}
	return Policy{}, fmt.Errorf("unknown backoff preset %q: allowed values are %s", name, strings.Join(PresetNames(), ", "))
}
