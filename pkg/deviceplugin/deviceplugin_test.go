package deviceplugin

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakePlugin is a device plugin with two devices, one healthy.
type fakePlugin struct {
	api.UnimplementedDevicePluginServer
}

func (*fakePlugin) ListAndWatch(_ *api.Empty, s api.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&api.ListAndWatchResponse{Devices: []*api.Device{{ID: "kvm0", Health: api.Healthy}, {ID: "kvm1", Health: api.Unhealthy}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (*fakePlugin) Allocate(_ context.Context, r *api.AllocateRequest) (*api.AllocateResponse, error) {
	resp := &api.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerAllocateResponse{
			Devices: []*api.DeviceSpec{{HostPath: "/dev/kvm", ContainerPath: "/dev/kvm", Permissions: "rw"}}})
	}
	return resp, nil
}

func TestRegisterFollowsThePluginAndAllocates(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	l, err := net.Listen("unix", filepath.Join(dir, "kvm.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	api.RegisterDevicePluginServer(g, &fakePlugin{})
	go func() { _ = g.Serve(l) }()
	defer g.Stop()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := api.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := reg.Register(ctx, &api.RegisterRequest{Version: "v1alpha", Endpoint: "kvm.sock", ResourceName: "devices.kubevirt.io/kvm"}); err == nil || !strings.Contains(err.Error(), "speaks v1beta1") {
		t.Errorf("old version: err %v", err)
	}
	if _, err := reg.Register(ctx, &api.RegisterRequest{Version: api.Version, Endpoint: "../kvm.sock", ResourceName: "devices.kubevirt.io/kvm"}); err == nil || !strings.Contains(err.Error(), "want a socket name") {
		t.Errorf("endpoint outside the folder: err %v", err)
	}
	if _, err := reg.Register(ctx, &api.RegisterRequest{Version: api.Version, Endpoint: "kvm.sock", ResourceName: "devices.kubevirt.io/kvm"}); err != nil {
		t.Fatal(err)
	}
	for s.Healthy()["devices.kubevirt.io/kvm"] != 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("healthy counts %v, want kvm 1 (of 2 devices)", s.Healthy())
		case <-time.After(10 * time.Millisecond):
		}
	}
	devs, err := s.Allocate(ctx, "devices.kubevirt.io/kvm", 1)
	if err != nil || len(devs) != 1 || devs[0] != "/dev/kvm:/dev/kvm:rw" {
		t.Errorf("Allocate = %v, %v", devs, err)
	}
	if _, err := s.Allocate(ctx, "devices.kubevirt.io/kvm", 2); err == nil || !strings.Contains(err.Error(), "fewer healthy") {
		t.Errorf("more than healthy: err %v", err)
	}
	if _, err := s.Allocate(ctx, "devices.kubevirt.io/tun", 1); err == nil || !strings.Contains(err.Error(), "no device plugin registered") {
		t.Errorf("unregistered: err %v", err)
	}
}
