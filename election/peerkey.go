package election

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Peer keys. A member with an address and no configured certificate makes
// an ECDSA P-256 key and a self-signed certificate for it when Run starts,
// in memory; they live as long as the process. While it leads it writes
// the key's fingerprint in the lock record (Record.PeerKey). A follower
// dialling the leader trusts no CA and no host name: it accepts the server
// only if the key it proves it holds has the fingerprint of the record the
// follower read from the store. Whoever can write the record can already
// lead, so this adds no trust beyond the store's.

// ErrPeerKeyMismatch is the TLS handshake error of a follower whose peer
// presented a key other than the one the lock record names.
var ErrPeerKeyMismatch = errors.New("election: the peer's key is not the one the lock record names")

const peerKeyPrefix = "sha256:"

// PeerKeyOf returns the fingerprint written as Record.PeerKey for cert:
// "sha256:" and the unpadded base64url SHA-256 of its SubjectPublicKeyInfo.
func PeerKeyOf(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return peerKeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// newPeerIdentity makes the ephemeral key pair and self-signed certificate
// of one elector, and its fingerprint.
func newPeerIdentity(serverID string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("election: peer key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("election: peer key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "tenure peer " + serverID},
		// Followers check the key, not the dates; a wide window keeps a
		// member whose wall clock is off from being refused by other
		// clients that do check them.
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("election: peer certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("election: peer certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, PeerKeyOf(leaf), nil
}

// configuredPeerKey returns the fingerprint of the one certificate a
// configured server TLS presents, or "" when that is not known in advance
// (several certificates, or chosen per connection): followers without a
// client configuration of their own then do not ask this leader.
func configuredPeerKey(c *tls.Config) string {
	if c == nil || len(c.Certificates) != 1 || c.GetCertificate != nil || c.GetConfigForClient != nil ||
		len(c.Certificates[0].Certificate) == 0 {
		return ""
	}
	leaf := c.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificates[0].Certificate[0]); err != nil {
			return ""
		}
	}
	return PeerKeyOf(leaf)
}

// pinnedTLS is a follower's TLS configuration for a leader whose record
// names key: no chain or host name is checked (there is no CA), only that
// the server proved it holds a key with that fingerprint. The handshake
// proves possession: the server signs it with the certificate's key.
func pinnedTLS(key string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the key check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return ErrPeerKeyMismatch
			}
			if got := PeerKeyOf(cs.PeerCertificates[0]); got != key {
				return fmt.Errorf("%w: the server's is %s, the record's %s", ErrPeerKeyMismatch, got, key)
			}
			return nil
		},
	}
}
