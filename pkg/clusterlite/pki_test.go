package clusterlite

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"testing"
)

// parseCert decodes one PEM certificate.
func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, rest := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("not exactly one PEM certificate: %q", certPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return c
}

func TestNewCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, ca.CertPEM())
	if !c.IsCA || c.Subject.CommonName != "test-ca" || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA=%v CN=%q usage=%v", c.IsCA, c.Subject.CommonName, c.KeyUsage)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
}

func TestIssueServingCert(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	dns := []string{"virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local"}
	ips := []net.IP{net.ParseIP("10.254.0.10")}
	certPEM, keyPEM, err := ca.IssueServingCert(dns, ips)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	if _, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Errorf("key is %T, want ECDSA", pair.PrivateKey)
	}
	c := parseCert(t, certPEM)
	if c.IsCA {
		t.Error("serving certificate is a CA")
	}
	if c.Subject.CommonName != dns[0] || !slices.Equal(c.DNSNames, dns) {
		t.Errorf("names: CN=%q DNS=%v, want %q and %v", c.Subject.CommonName, c.DNSNames, dns[0], dns)
	}
	for _, name := range []string{"virt-api.kubevirt.svc", "10.254.0.10"} {
		opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := c.Verify(opts); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	for _, opts := range []x509.VerifyOptions{
		{Roots: ca.Pool(), DNSName: "kubernetes.default.svc"},
		{Roots: ca.Pool(), DNSName: "10.254.0.11"},
		{Roots: other.Pool(), DNSName: "virt-api.kubevirt.svc"},
		{Roots: ca.Pool(), DNSName: "virt-api.kubevirt.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		if _, err := c.Verify(opts); err == nil {
			t.Errorf("verified with name %q, usages %v, other CA %v; want an error", opts.DNSName, opts.KeyUsages, opts.Roots != nil && opts.Roots.Equal(other.Pool()))
		}
	}

	// An IP alone names the certificate by the IP.
	certPEM, _, err = ca.IssueServingCert(nil, ips)
	if err != nil {
		t.Fatal(err)
	}
	if cn := parseCert(t, certPEM).Subject.CommonName; cn != "10.254.0.10" {
		t.Errorf("CN of an IP-only certificate = %q", cn)
	}
	if _, _, err := ca.IssueServingCert(nil, nil); err == nil {
		t.Error("a certificate without names was issued")
	}
}

func TestIssueClientCert(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueClientCert(FrontProxyClientName, []string{"g1", "g2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	c := parseCert(t, certPEM)
	if c.Subject.CommonName != FrontProxyClientName || !slices.Equal(c.Subject.Organization, []string{"g1", "g2"}) {
		t.Errorf("subject %v", c.Subject)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify as client: %v", err)
	}
	if _, _, err := ca.IssueClientCert("", nil); err == nil {
		t.Error("a client certificate without a name was issued")
	}
}

func TestServiceAccountKeys(t *testing.T) {
	privPEM, pubPEM, err := serviceAccountKeys()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(privPEM)
	if pb == nil || pb.Type != "PRIVATE KEY" {
		t.Fatalf("private key PEM: %q", privPEM)
	}
	priv, err := x509.ParsePKCS8PrivateKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := pem.Decode(pubPEM)
	if ub == nil || ub.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM: %q", pubPEM)
	}
	pub, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.(*ecdsa.PrivateKey).PublicKey.Equal(pub) {
		t.Error("public key does not belong to the private key")
	}
}

func TestIssueNamedServingCertTakesTheCommonNameGiven(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.IssueNamedServingCert(handlerServerCN, []string{"virt-handler.kubevirt.svc"}, []net.IP{net.ParseIP("10.254.0.11")})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != handlerServerCN || cert.DNSNames[0] != "virt-handler.kubevirt.svc" || !cert.IPAddresses[0].Equal(net.ParseIP("10.254.0.11")) {
		t.Errorf("subject %q, DNS %v, IPs %v", cert.Subject.CommonName, cert.DNSNames, cert.IPAddresses)
	}
	if _, _, err := ca.IssueNamedServingCert("", []string{"x"}, nil); err == nil {
		t.Error("an empty common name was accepted")
	}
}
