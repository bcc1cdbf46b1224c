package clusterlite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	// caValidity is how long a generated CA is valid; control planes are
	// short-lived, but a long-running developer cluster should not expire.
	caValidity = 10 * 365 * 24 * time.Hour
	// leafValidity is how long an issued certificate is valid.
	leafValidity = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so that a peer whose clock is slightly
	// behind still accepts a certificate issued a moment ago.
	clockSkew = time.Hour
)

// CA is a certificate authority held in memory. Its key is never written to
// disk. A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// NewCA generates a self-signed ECDSA P-256 certificate authority whose
// subject is commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key of CA %q: %w", commonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("serial of CA %q: %w", commonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA %q just created: %w", commonName, err)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}, nil
}

// CertPEM returns the CA certificate, PEM-encoded. The caller must not
// modify the returned slice.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// IssueServingCert issues a TLS server certificate whose subject alternative
// names are exactly dnsNames and ips; at least one is required. The common
// name is the first DNS name, or the first IP. Both results are PEM: the
// certificate alone (not the chain) and the PKCS#8 private key.
func (ca *CA) IssueServingCert(dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	cn := ""
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	} else if len(ips) > 0 {
		cn = ips[0].String()
	}
	return ca.IssueNamedServingCert(cn, dnsNames, ips)
}

// IssueNamedServingCert is IssueServingCert with the common name given:
// KubeVirt's components check their peers' common names
// (kubevirt.io:system:node:virt-handler for virt-handler's server).
func (ca *CA) IssueNamedServingCert(cn string, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, errors.New("issue serving certificate: no DNS name and no IP")
	}
	if cn == "" {
		return nil, nil, errors.New("issue serving certificate: empty common name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    append([]string(nil), dnsNames...),
		IPAddresses: append([]net.IP(nil), ips...),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certPEM, keyPEM, err = ca.issue(tmpl)
	if err != nil {
		return nil, nil, fmt.Errorf("issue serving certificate for %q: %w", cn, err)
	}
	return certPEM, keyPEM, nil
}

// IssueClientCert issues a TLS client certificate for user commonName in
// the given groups (the subject's organizations, as Kubernetes reads them).
// Both results are PEM: the certificate and the PKCS#8 private key.
func (ca *CA) IssueClientCert(commonName string, groups []string) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("issue client certificate: empty common name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: append([]string(nil), groups...)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	certPEM, keyPEM, err = ca.issue(tmpl)
	if err != nil {
		return nil, nil, fmt.Errorf("issue client certificate for %q: %w", commonName, err)
	}
	return certPEM, keyPEM, nil
}

// issue fills in serial, validity and key of tmpl, signs it with the CA and
// returns certificate and key as PEM.
func (ca *CA) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(leafValidity)
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign: %w", err)
	}
	keyPEM, err = privateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// randomSerial returns a random positive 127-bit certificate serial number.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, fmt.Errorf("random serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// privateKeyPEM encodes key as a PEM "PRIVATE KEY" (PKCS#8) block.
func privateKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// serviceAccountKeys generates the key pair the API server signs and
// verifies service-account tokens with: the private key as PKCS#8 PEM and
// the public key as PKIX PEM.
func serviceAccountKeys() (privPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account key: %w", err)
	}
	privPEM, err = privateKeyPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
