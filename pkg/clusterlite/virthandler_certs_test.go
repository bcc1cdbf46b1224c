package clusterlite

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
)

// TestWriteVirtHandlerPKIHasLaterReleasesClientCerts checks the migration
// and vsock client certificates v1.7.0's virt-handler reads, by their
// common names as virt-operator issues them, and that every one of them
// has a mount path.
func TestWriteVirtHandlerPKIHasLaterReleasesClientCerts(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{ca: ca}
	files, err := cp.WriteVirtHandlerPKI(t.TempDir(), net.ParseIP("10.254.0.11"))
	if err != nil {
		t.Fatal(err)
	}
	for name, cn := range map[string]string{"tls.crt": handlerServerCN, "client.crt": handlerClientCN,
		"migration.crt": handlerMigrationCN, "vsock.crt": handlerVsockCN} {
		data, err := os.ReadFile(files[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		block, _ := pem.Decode(data)
		if block == nil {
			t.Fatalf("%s: no PEM block", name)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cert.Subject.CommonName != cn {
			t.Errorf("%s: common name %q, want %q", name, cert.Subject.CommonName, cn)
		}
	}
	for name := range handlerCertMounts {
		if _, ok := files[name]; !ok {
			t.Errorf("%s is mounted but not written", name)
		}
	}
}
