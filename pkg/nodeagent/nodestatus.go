package nodeagent

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"log/slog"
)

// capacity is the node's capacity: cpu, memory and pods, and the
// device-plugin resources: in kubelet-only mode the healthy counts the
// plugins report (none before they register), else 1k of each of
// virt-handler's (the agent plays its plugins).
func (a *Agent) capacity() k8sv1.ResourceList {
	c := k8sv1.ResourceList{
		k8sv1.ResourceCPU: resource.MustParse("2"), k8sv1.ResourceMemory: resource.MustParse("16Gi"),
		k8sv1.ResourcePods: resource.MustParse("110"),
	}
	if a.cfg.Kubelet == nil {
		for _, d := range []string{"kvm", "tun", "vhost-net"} {
			c[k8sv1.ResourceName(devicePrefix+d)] = resource.MustParse("1k")
		}
		return c
	}
	if a.cfg.Kubelet.Devices != nil {
		for name, n := range a.cfg.Kubelet.Devices.Healthy() {
			c[k8sv1.ResourceName(name)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
		}
	}
	return c
}

// nodeStatus is kubelet's node status loop in kubelet-only mode: the
// Ready condition's heartbeat every 10 s (kubelet's
// nodeStatusUpdateFrequency), and the capacity as soon as the device
// plugins' counts change (read every second).
func (a *Agent) nodeStatus(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last k8sv1.ResourceList
	var beat time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c := a.capacity()
		if maps.EqualFunc(c, last, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 }) && time.Since(beat) < 10*time.Second {
			continue
		}
		node, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		node.Status.Capacity, node.Status.Allocatable = c, c
		now := metav1.Now()
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == k8sv1.NodeReady {
				node.Status.Conditions[i].LastHeartbeatTime = now
			}
		}
		if _, err := a.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Debug("node status", "err", err)
			}
			continue
		}
		if !maps.EqualFunc(c, last, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 }) {
			a.cfg.Logger.Info("node capacity", "devices", devicesOf(c))
		}
		last, beat = c, time.Now()
	}
}

// devicesOf lists the device resources of c.
func devicesOf(c k8sv1.ResourceList) map[string]string {
	m := map[string]string{}
	for name, q := range c {
		if len(name) > len(devicePrefix) && string(name[:len(devicePrefix)]) == devicePrefix {
			m[string(name)] = strconv.FormatInt(q.Value(), 10)
		}
	}
	return m
}

// removePodDir removes the pod's kubelet folder once the pod is gone.
// From the host's mount namespace: a bind that virt-handler left on a
// file under it (in the node namespace) is detached by the unlink rather
// than refusing it.
func (m *KubeletMode) removePodDir(uid types.UID, log *slog.Logger) {
	dir := filepath.Join(m.PodsDir, string(uid))
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("removing the pod's kubelet folder", "dir", dir, "err", err)
	}
}
