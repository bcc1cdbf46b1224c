// Command kube-apiserver runs the Kubernetes API server of k8s.io/kubernetes,
// built as a standalone binary so that pkg/clusterlite can start a real API
// server on loopback without any downloaded release archive.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
