package monitor

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
)

// server is the kubevirt.cmd.v1.Cmd service on the launcher socket. The
// start/stop path is served; every other RPC answers Unimplemented
// (unimplemented.go). As in KubeVirt's cmd-server, an operation that fails
// is a Response with Success false and a message, not a gRPC error.
type server struct {
	m *Monitor
}

// vmiOf decodes a request's VMI as KubeVirt's cmd-server does.
func vmiOf(req *cmdv1.VMIRequest) (*v1.VirtualMachineInstance, *cmdv1.Response) {
	var vmi v1.VirtualMachineInstance
	if req.GetVmi() == nil || json.Unmarshal(req.Vmi.VmiJson, &vmi) != nil {
		return nil, &cmdv1.Response{Message: "No valid vmi object present in command server request"}
	}
	return &vmi, nil
}

func answer(err error) *cmdv1.Response {
	if err != nil {
		return &cmdv1.Response{Message: err.Error()}
	}
	return &cmdv1.Response{Success: true}
}

// SyncVirtualMachine starts the VMI's domain, or reports it running; the
// request's options carry the interface domain attachments KubeVirt's
// phase 2 needs.
func (s *server) SyncVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	vmi, bad := vmiOf(req)
	if bad != nil {
		return bad, nil
	}
	err := s.m.Sync(ctx, vmi, req.GetOptions().GetInterfaceDomainAttachment())
	if err != nil {
		s.m.log.Warn("failed to sync vmi", "vmi", vmi.Namespace+"/"+vmi.Name, "err", err)
	}
	return answer(err), nil
}

// ShutdownVirtualMachine asks the guest to power off (ACPI).
func (s *server) ShutdownVirtualMachine(_ context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	if _, bad := vmiOf(req); bad != nil {
		return bad, nil
	}
	return answer(s.m.Shutdown()), nil
}

// KillVirtualMachine destroys the domain.
func (s *server) KillVirtualMachine(_ context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	if _, bad := vmiOf(req); bad != nil {
		return bad, nil
	}
	return answer(s.m.Kill()), nil
}

// DeleteVirtualMachine removes the domain.
func (s *server) DeleteVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	if _, bad := vmiOf(req); bad != nil {
		return bad, nil
	}
	return answer(s.m.Delete(ctx)), nil
}

// GetDomain returns the domain as JSON, or no domain.
func (s *server) GetDomain(context.Context, *cmdv1.EmptyRequest) (*cmdv1.DomainResponse, error) {
	resp := &cmdv1.DomainResponse{Response: &cmdv1.Response{Success: true}}
	if d := s.m.Domain(); d != nil {
		data, err := json.Marshal(d)
		if err != nil {
			return &cmdv1.DomainResponse{Response: answer(fmt.Errorf("encoding the domain: %w", err))}, nil
		}
		resp.Domain = string(data)
	}
	return resp, nil
}

// Ping answers that the launcher is alive.
func (s *server) Ping(context.Context, *cmdv1.EmptyRequest) (*cmdv1.Response, error) {
	return &cmdv1.Response{Success: true}, nil
}
