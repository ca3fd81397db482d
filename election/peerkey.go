package election

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/internal/peerkey"
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

// PeerKeyOf returns the fingerprint written as Record.PeerKey for cert:
// "sha256:" and the unpadded base64url SHA-256 of its SubjectPublicKeyInfo.
func PeerKeyOf(cert *x509.Certificate) string { return peerkey.Of(cert) }

// newPeerIdentity makes the ephemeral key pair and self-signed certificate
// of one elector, and its fingerprint.
func newPeerIdentity(serverID string) (tls.Certificate, string, error) {
	cert, key, err := peerkey.New("tenure peer " + serverID)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("election: %w", err)
	}
	return cert, key, nil
}

// configuredPeerKey returns the fingerprint of the one certificate a
// configured server TLS presents, or "" when that is not known in advance
// (several certificates, or chosen per connection): followers without a
// client configuration of their own then do not ask this leader.
func configuredPeerKey(c *tls.Config) string { return peerkey.Configured(c) }

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
