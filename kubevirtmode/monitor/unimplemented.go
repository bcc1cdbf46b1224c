package monitor

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
)

// unimplemented answers an RPC outside the start/stop path with gRPC
// Unimplemented, naming the RPC (its full method name) so that
// virt-handler's log says which call is not served.
func unimplemented(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	return status.Errorf(codes.Unimplemented, "%s is not served by the crashloop launcher's KubeVirt mode (it serves Info, SyncVirtualMachine, GetDomain, Ping, ShutdownVirtualMachine, KillVirtualMachine and DeleteVirtualMachine)", method)
}

// PauseVirtualMachine is not served: gRPC Unimplemented.
func (s *server) PauseVirtualMachine(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// UnpauseVirtualMachine is not served: gRPC Unimplemented.
func (s *server) UnpauseVirtualMachine(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// FreezeVirtualMachine is not served: gRPC Unimplemented.
func (s *server) FreezeVirtualMachine(ctx context.Context, _ *cmdv1.FreezeRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// UnfreezeVirtualMachine is not served: gRPC Unimplemented.
func (s *server) UnfreezeVirtualMachine(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// ResetVirtualMachine is not served: gRPC Unimplemented.
func (s *server) ResetVirtualMachine(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// SoftRebootVirtualMachine is not served: gRPC Unimplemented.
func (s *server) SoftRebootVirtualMachine(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// MigrateVirtualMachine is not served: gRPC Unimplemented.
func (s *server) MigrateVirtualMachine(ctx context.Context, _ *cmdv1.MigrationRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// SyncMigrationTarget is not served: gRPC Unimplemented.
func (s *server) SyncMigrationTarget(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// CancelVirtualMachineMigration is not served: gRPC Unimplemented.
func (s *server) CancelVirtualMachineMigration(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// SignalTargetPodCleanup is not served: gRPC Unimplemented.
func (s *server) SignalTargetPodCleanup(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// FinalizeVirtualMachineMigration is not served: gRPC Unimplemented.
func (s *server) FinalizeVirtualMachineMigration(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// HotplugHostDevices is not served: gRPC Unimplemented.
func (s *server) HotplugHostDevices(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// GetDomainStats is not served: gRPC Unimplemented.
func (s *server) GetDomainStats(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.DomainStatsResponse, error) {
	return nil, unimplemented(ctx)
}

// GetGuestInfo is not served: gRPC Unimplemented.
func (s *server) GetGuestInfo(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.GuestInfoResponse, error) {
	return nil, unimplemented(ctx)
}

// GetUsers is not served: gRPC Unimplemented.
func (s *server) GetUsers(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.GuestUserListResponse, error) {
	return nil, unimplemented(ctx)
}

// GetFilesystems is not served: gRPC Unimplemented.
func (s *server) GetFilesystems(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.GuestFilesystemsResponse, error) {
	return nil, unimplemented(ctx)
}

// Exec is not served: gRPC Unimplemented.
func (s *server) Exec(ctx context.Context, _ *cmdv1.ExecRequest) (*cmdv1.ExecResponse, error) {
	return nil, unimplemented(ctx)
}

// GuestPing is not served: gRPC Unimplemented.
func (s *server) GuestPing(ctx context.Context, _ *cmdv1.GuestPingRequest) (*cmdv1.GuestPingResponse, error) {
	return nil, unimplemented(ctx)
}

// VirtualMachineMemoryDump is not served: gRPC Unimplemented.
func (s *server) VirtualMachineMemoryDump(ctx context.Context, _ *cmdv1.MemoryDumpRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// GetQemuVersion is not served: gRPC Unimplemented.
func (s *server) GetQemuVersion(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.QemuVersionResponse, error) {
	return nil, unimplemented(ctx)
}

// SyncVirtualMachineCPUs is not served: gRPC Unimplemented.
func (s *server) SyncVirtualMachineCPUs(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// SyncVirtualMachineMemory is not served: gRPC Unimplemented.
func (s *server) SyncVirtualMachineMemory(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// GetSEVInfo is not served: gRPC Unimplemented.
func (s *server) GetSEVInfo(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.SEVInfoResponse, error) {
	return nil, unimplemented(ctx)
}

// GetLaunchMeasurement is not served: gRPC Unimplemented.
func (s *server) GetLaunchMeasurement(ctx context.Context, _ *cmdv1.VMIRequest) (*cmdv1.LaunchMeasurementResponse, error) {
	return nil, unimplemented(ctx)
}

// InjectLaunchSecret is not served: gRPC Unimplemented.
func (s *server) InjectLaunchSecret(ctx context.Context, _ *cmdv1.InjectLaunchSecretRequest) (*cmdv1.Response, error) {
	return nil, unimplemented(ctx)
}

// GetDomainDirtyRateStats is not served: gRPC Unimplemented.
func (s *server) GetDomainDirtyRateStats(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.DirtyRateStatsResponse, error) {
	return nil, unimplemented(ctx)
}
