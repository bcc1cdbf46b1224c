// Package deviceplugin is kubelet's side of the device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) for cluster-lite's node
// when KubeVirt's own virt-handler runs there: a Registration server on
// <dir>/kubelet.sock, which virt-handler's kvm, tun and vhost-net plugins
// register with. For every registration it dials the plugin's endpoint
// in dir and follows ListAndWatch, keeping the healthy count per resource
// (the node's capacity); Allocate asks the plugin for a container's
// devices, which the runtime passes on.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Server is a running Registration server.
type Server struct {
	api.UnimplementedRegistrationServer
	dir      string
	log      *slog.Logger
	changed  func()
	grpc     *grpc.Server
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	plugins  map[string]*plugin // by resource name
	register int                // registrations seen
}

// plugin is one registered plugin and what ListAndWatch last said.
type plugin struct {
	endpoint string
	conn     *grpc.ClientConn
	client   api.DevicePluginClient
	healthy  []string // healthy device IDs
	total    int
	cancel   context.CancelFunc
}

// Start serves the Registration service on dir/kubelet.sock (a stale
// socket there is removed). changed is called whenever a resource's
// device counts change.
func Start(dir string, changed func(), log *slog.Logger) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("device plugins: %w", err)
	}
	sock := filepath.Join(dir, "kubelet.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("device plugins: removing stale %s: %w", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("device plugins: listening on %s: %w", sock, err)
	}
	s := &Server{dir: dir, log: log, changed: changed, grpc: grpc.NewServer(), plugins: map[string]*plugin{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	api.RegisterRegistrationServer(s.grpc, s)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.grpc.Serve(l)
	}()
	return s, nil
}

// Register is a plugin's registration: its endpoint (a socket in the
// server's folder) is dialled and followed. A new registration of a
// resource replaces the old one (a restarted virt-handler).
func (s *Server) Register(_ context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	if r.Version != api.Version {
		return nil, fmt.Errorf("device plugin %s: version %q: this kubelet speaks %s", r.ResourceName, r.Version, api.Version)
	}
	if filepath.Base(r.Endpoint) != r.Endpoint {
		return nil, fmt.Errorf("device plugin %s: endpoint %q: want a socket name in %s", r.ResourceName, r.Endpoint, s.dir)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("device plugin %s: dialling %s: %w", r.ResourceName, r.Endpoint, err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	p := &plugin{endpoint: r.Endpoint, conn: conn, client: api.NewDevicePluginClient(conn), cancel: cancel}
	s.mu.Lock()
	old := s.plugins[r.ResourceName]
	s.plugins[r.ResourceName] = p
	s.register++
	s.mu.Unlock()
	if old != nil {
		old.cancel()
		_ = old.conn.Close()
	}
	s.log.Info("device plugin registered", "resource", r.ResourceName, "endpoint", r.Endpoint)
	s.wg.Add(1)
	go s.follow(ctx, r.ResourceName, p)
	return &api.Empty{}, nil
}

// follow runs ListAndWatch of p until it ends or ctx does.
func (s *Server) follow(ctx context.Context, resource string, p *plugin) {
	defer s.wg.Done()
	stream, err := p.client.ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		s.log.Warn("device plugin ListAndWatch failed", "resource", resource, "err", err)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Info("device plugin stream ended", "resource", resource, "err", err)
			}
			return
		}
		var healthy []string
		for _, d := range resp.Devices {
			if d.Health == api.Healthy {
				healthy = append(healthy, d.ID)
			}
		}
		s.mu.Lock()
		p.healthy, p.total = healthy, len(resp.Devices)
		s.mu.Unlock()
		s.log.Debug("device plugin devices", "resource", resource, "devices", len(resp.Devices), "healthy", len(healthy))
		if s.changed != nil {
			s.changed()
		}
	}
}

// Healthy is the healthy device count of every registered resource.
func (s *Server) Healthy() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for name, p := range s.plugins {
		m[name] = len(p.healthy)
	}
	return m
}

// Registrations is how many registrations the server has seen.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.register
}

// Allocate asks the plugin of resource for n of its healthy devices and
// returns the devices to give the container, in podman's --device form
// HOST:CONTAINER:PERMISSIONS.
func (s *Server) Allocate(ctx context.Context, resource string, n int) ([]string, error) {
	s.mu.Lock()
	p := s.plugins[resource]
	var ids []string
	if p != nil && len(p.healthy) >= n {
		ids = append(ids, p.healthy[:n]...)
	}
	s.mu.Unlock()
	switch {
	case p == nil:
		return nil, fmt.Errorf("resource %s: no device plugin registered", resource)
	case len(ids) < n:
		return nil, fmt.Errorf("resource %s: %d devices wanted, fewer healthy", resource, n)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := p.client.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIDs: ids}}})
	if err != nil {
		return nil, fmt.Errorf("resource %s: Allocate: %w", resource, err)
	}
	seen := map[string]bool{}
	var devices []string
	for _, c := range resp.ContainerResponses {
		for _, d := range c.Devices {
			v := d.HostPath + ":" + d.ContainerPath + ":" + d.Permissions
			if !seen[v] {
				seen[v] = true
				devices = append(devices, v)
			}
		}
	}
	return devices, nil
}

// Stop stops serving and following.
func (s *Server) Stop() {
	s.cancel()
	s.grpc.Stop()
	s.mu.Lock()
	for _, p := range s.plugins {
		_ = p.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
