// Command kubevirt-manifests prints every object a bare kube-apiserver needs
// before KubeVirt's real virt-controller and virt-api can run against it, as
// a YAML stream (or a JSON v1 List). The objects come from KubeVirt v1.6.0's
// own operator code (pkg/virt-operator/resource/generate/...), the same
// functions virt-operator uses to install KubeVirt; cluster-lite only fills
// in what the operator would fill in at runtime: the CA bundle, the
// virt-api Service's fixed cluster IP, and the KubeVirt CR's status.
//
// With --apply it also writes them to the API server named by --kubeconfig
// (server-side apply, and the KubeVirt status through its status
// subresource, which a plain create would drop).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/crashloop-harness/crashloop/tools/clusterlite/kubevirt/kubevirt-manifests/manifests"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), os.Args[1:], os.Stdout, logger); err != nil {
		logger.Error("kubevirt-manifests failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("kubevirt-manifests", flag.ContinueOnError)
	opts := manifests.DefaultOptions()
	var (
		caBundleFile string
		featureGates string
		output       string
		apply        bool
		kubeconfig   string
	)
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace,
		"namespace KubeVirt runs in; virt-api and virt-controller outside a pod always assume \"kubevirt\"")
	fs.StringVar(&opts.VirtAPIServiceIP, "virt-api-service-ip", opts.VirtAPIServiceIP,
		"fixed clusterIP of the virt-api Service (must be in kube-apiserver's --service-cluster-ip-range)")
	fs.IntVar(&opts.VirtAPIServicePort, "virt-api-service-port", opts.VirtAPIServicePort,
		"port of the virt-api Service; the aggregator and the webhooks dial clusterIP:port")
	fs.IntVar(&opts.VirtAPITargetPort, "virt-api-target-port", opts.VirtAPITargetPort,
		"targetPort of the virt-api Service (informational: the Service has no selector)")
	fs.StringVar(&opts.VirtAPIEndpointIP, "virt-api-endpoint-ip", opts.VirtAPIEndpointIP,
		"address virt-api listens on, for the virt-api Endpoints (default: --virt-api-service-ip; not loopback)")
	fs.IntVar(&opts.VirtAPIEndpointPort, "virt-api-endpoint-port", opts.VirtAPIEndpointPort,
		"port virt-api listens on, for the virt-api Endpoints (default: --virt-api-service-port)")
	fs.StringVar(&caBundleFile, "ca-bundle", "",
		"PEM file with the CA that signed virt-api's serving certificate (APIService, webhooks, kubevirt-ca ConfigMap)")
	fs.StringVar(&opts.LauncherImage, "launcher-image", opts.LauncherImage,
		"virt-launcher image name recorded in the KubeVirt status (must match virt-controller --launcher-image)")
	fs.BoolVar(&opts.Webhooks, "webhooks", opts.Webhooks,
		"include virt-api's mutating and validating webhook configurations")
	fs.BoolVar(&opts.UseEmulation, "use-emulation", opts.UseEmulation,
		"set the KubeVirt CR's developerConfiguration.useEmulation (software emulation, no /dev/kvm request)")
	fs.StringVar(&featureGates, "feature-gates", "",
		"comma-separated KubeVirt feature gates for the KubeVirt CR")
	fs.StringVar(&output, "o", "yaml", "output format: yaml (a --- separated stream) or json (a v1 List)")
	fs.BoolVar(&apply, "apply", false, "also apply the objects to the API server of --kubeconfig")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --apply")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("parse flags: %w", err)
	}
	if caBundleFile != "" {
		pem, err := os.ReadFile(caBundleFile)
		if err != nil {
			return fmt.Errorf("read --ca-bundle: %w", err)
		}
		opts.CABundle = pem
	} else {
		logger.Warn("no --ca-bundle: the APIService and webhooks will not trust virt-api")
	}
	if featureGates != "" {
		opts.FeatureGates = strings.Split(featureGates, ",")
	}

	objs, err := manifests.Objects(opts)
	if err != nil {
		return fmt.Errorf("generate objects: %w", err)
	}
	if err := manifests.Write(stdout, objs, output); err != nil {
		return fmt.Errorf("write objects: %w", err)
	}
	if !apply {
		return nil
	}
	if kubeconfig == "" {
		return errors.New("--apply needs --kubeconfig")
	}
	if err := manifests.Apply(ctx, kubeconfig, objs, logger); err != nil {
		return fmt.Errorf("apply objects: %w", err)
	}
	return nil
}
