package monitor

import (
	"context"

	"kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/info"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
)

// infoServer is the CmdInfo handshake: the cmd versions served (v1 only,
// as KubeVirt v1.6.0's launcher).
type infoServer struct{}

// Info lists the supported cmd versions.
func (infoServer) Info(context.Context, *info.CmdInfoRequest) (*info.CmdInfoResponse, error) {
	return &info.CmdInfoResponse{SupportedCmdVersions: []uint32{cmdv1.CmdVersion}}, nil
}
