package clusterlite

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestWriteKubeconfig(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const server, token = "https://127.0.0.1:6443", "secret-token"
	// A second write replaces the first.
	for range 2 {
		if err := writeKubeconfig(path, server, ca.CertPEM(), token); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	got, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load written kubeconfig: %v", err)
	}
	want := restConfig(server, ca.CertPEM(), token)
	if got.Host != want.Host || got.BearerToken != want.BearerToken || !bytes.Equal(got.CAData, want.CAData) {
		t.Errorf("kubeconfig gives host %q token %q CA %q; want %q %q %q", got.Host, got.BearerToken, got.CAData, want.Host, want.BearerToken, want.CAData)
	}
	if got.Insecure || len(got.CertData) != 0 || got.Username != "" {
		t.Errorf("unexpected credentials or insecure: %+v", got)
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if raw.CurrentContext != contextName {
		t.Errorf("current context %q", raw.CurrentContext)
	}
}
