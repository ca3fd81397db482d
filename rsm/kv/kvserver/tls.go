package kvserver

import (
	"crypto/tls"
	"path/filepath"

	"github.com/tenure-io/tenure/internal/tlsutil"
)

// APITLS loads the HTTP API's TLS from PEM files: the server's
// certificate and key and, if clientCAFile is not "", the CAs that sign
// client certificates. A client certificate is then verified if given,
// not required at the handshake: Server requires one everywhere but the
// probes (Config.RequireClientCert), which kubelets and load balancers
// call without one.
func APITLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cfg, err := tlsutil.LoadServer(certFile, keyFile, clientCAFile)
	if err != nil {
		return nil, err
	}
	if clientCAFile != "" {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// PeerTLSFiles are the files a directory of peer TLS holds: the node's
// certificate (node.pem), its key (node-key.pem) and the CA that signs
// every node's (ca.pem).
func PeerTLSFiles(dir string) (certFile, keyFile, caFile string) {
	return filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"), filepath.Join(dir, "ca.pem")
}

// PeerTLS loads the peer RPCs' mutual TLS (rsm.HostConfig's ServerTLS
// and ClientTLS) from PEM files: the node's certificate and key, which it
// presents both as server and as client, and the CA that signs every
// node's.
func PeerTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if server, err = tlsutil.LoadServer(certFile, keyFile, caFile); err != nil {
		return nil, nil, err
	}
	if client, err = tlsutil.LoadClient(caFile, certFile, keyFile); err != nil {
		return nil, nil, err
	}
	return server, client, nil
}
