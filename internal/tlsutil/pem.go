package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CertPEM returns cert's chain and private key in PEM form, as
// tls.LoadX509KeyPair and LoadServer read them back.
func CertPEM(cert tls.Certificate) (certPEM, keyPEM []byte, err error) {
	if len(cert.Certificate) == 0 || cert.PrivateKey == nil {
		return nil, nil, errors.New("tls: certificate without a chain or a key")
	}
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: encoding the private key: %w", err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Files names PEM files written by WriteFiles.
type Files struct {
	CA   string // the CA's certificate: for --tls-ca and --tls-client-ca
	Cert string // the certificate chain
	Key  string // its private key, readable by the owner only
}

// WriteFiles issues a certificate for hosts and writes it, its key and the
// CA's certificate to dir as name.pem, name-key.pem and ca.pem.
func (ca *CA) WriteFiles(dir, name string, hosts ...string) (Files, error) {
	cert, err := ca.Issue(name, hosts...)
	if err != nil {
		return Files{}, err
	}
	certPEM, keyPEM, err := CertPEM(cert)
	if err != nil {
		return Files{}, err
	}
	f := Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+"-key.pem"),
	}
	for _, w := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{{f.CA, ca.PEM(), 0o644}, {f.Cert, certPEM, 0o644}, {f.Key, keyPEM, 0o600}} {
		if err := os.WriteFile(w.path, w.data, w.perm); err != nil {
			return Files{}, fmt.Errorf("tls: %w", err)
		}
	}
	return f, nil
}
