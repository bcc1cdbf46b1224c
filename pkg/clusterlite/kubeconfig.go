package clusterlite

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// contextName names the cluster, user and context of a written kubeconfig.
const contextName = "clusterlite"

// restConfig returns a client configuration for server that trusts only
// caPEM and authenticates with the bearer token.
func restConfig(server string, caPEM []byte, token string) *rest.Config {
	return &rest.Config{
		Host:            server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), caPEM...)},
	}
}

// writeKubeconfig writes a kubeconfig file with one cluster, user and
// (current) context, all named clusterlite, equivalent to restConfig. The
// file holds a credential and is written with mode 0600, atomically.
func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = append([]byte(nil), caPEM...)
	cfg.Clusters[contextName] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	cfg.AuthInfos[contextName] = user
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = contextName
	kctx.AuthInfo = contextName
	cfg.Contexts[contextName] = kctx
	cfg.CurrentContext = contextName
	content, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig %s: %w", path, err)
	}
	if err := writeFileAtomic(path, content, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file next to path and renames
// it over path, so that a concurrent reader sees the old or the new content
// and never a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return nil
}
