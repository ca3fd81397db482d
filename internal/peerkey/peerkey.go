// Package peerkey makes the ephemeral identities that peers prove to each
// other without a certificate authority: an ECDSA P-256 key and a
// self-signed certificate per process, named by the fingerprint of the
// key. The fingerprint is published in the store, whose writers are the
// root of trust; a peer is accepted only if the key it proves in the TLS
// handshake has a published fingerprint.
package peerkey

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"time"
)

const prefix = "sha256:"

// Of returns cert's fingerprint: "sha256:" and the unpadded base64url
// SHA-256 of its SubjectPublicKeyInfo.
func Of(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return prefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// New makes an ephemeral key pair and a self-signed certificate for it,
// usable as server and as client, with name as its common name, and
// returns them with the key's fingerprint.
func New(name string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("peer key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("peer key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		// Peers check the key, not the dates; a wide window keeps a
		// process whose wall clock is off from being refused by other
		// clients that do check them.
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("peer certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("peer certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, Of(leaf), nil
}

// Configured returns the fingerprint of the one certificate c presents (as
// server, or as client), or "" when that is not known in advance (none or
// several certificates, or one chosen per connection).
func Configured(c *tls.Config) string {
	if c == nil || len(c.Certificates) != 1 || c.GetCertificate != nil || c.GetConfigForClient != nil ||
		c.GetClientCertificate != nil || len(c.Certificates[0].Certificate) == 0 {
		return ""
	}
	leaf := c.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificates[0].Certificate[0]); err != nil {
			return ""
		}
	}
	return Of(leaf)
}
