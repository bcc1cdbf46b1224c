// Command virt-api runs KubeVirt's own virt-api, linked from
// kubevirt.io/kubevirt v1.6.0, the same way KubeVirt's cmd/virt-api does:
// it serves the subresources.kubevirt.io aggregated API (VM start/stop,
// console, ...) and KubeVirt's admission webhooks. Flags are KubeVirt's
// (see NOTES.md for the ones cluster-lite sets).
package main

import (
	kvlog "kubevirt.io/client-go/log"

	"kubevirt.io/kubevirt/pkg/service"
	virtapi "kubevirt.io/kubevirt/pkg/virt-api"
)

func main() {
	kvlog.InitializeLogging("virt-api")
	app := virtapi.NewVirtApi()
	service.Setup(app)
	app.Execute()
}
