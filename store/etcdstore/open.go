package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "etcd"

// DefaultPort is the port of an endpoint given without one.
const DefaultPort = "2379"

// DefaultDialTimeout bounds how long Open waits for a server to answer.
const DefaultDialTimeout = 5 * time.Second

// Environment variables that OpenURL reads for credentials, which never go
// in the URL.
const (
	EnvUsername = "TENURE_ETCD_USERNAME"
	EnvPassword = "TENURE_ETCD_PASSWORD"
)

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL, _ store.OpenOptions) (driver.Store, error) {
		s, err := OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// URL query parameters OpenURL accepts.
var params = []string{"tls", "ca", "cert", "key", "server_name", "dial_timeout"}

// NewClientConfig returns the client configuration OpenURL uses for
// endpoints (such as "http://127.0.0.1:2379"), for callers who build their
// own client for New. It differs from the client's defaults in three ways:
//
//   - MaxUnaryRetries is 1: the client sends every request once. Its
//     retry interceptor would otherwise repeat a transaction in some
//     cases (see the package documentation), and a repeated conditional
//     write whose first attempt landed fails against itself.
//   - The message size limits are 2 GiB, so that the server's
//     --max-request-bytes decides which values fit (the client's own
//     default would refuse any value over 2 MiB).
//   - Keepalive pings every 10 s while a request or watch is open, so that
//     a dead connection is noticed and a watch moves to another endpoint.
//
// The client logs nothing (zap.NewNop); set Logger to see its logs.
func NewClientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          DefaultDialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		MaxCallSendMsgSize:   math.MaxInt32,
		MaxCallRecvMsgSize:   math.MaxInt32,
		MaxUnaryRetries:      1,
		Logger:               zap.NewNop(),
	}
}

// OpenURL opens a driver for a URL such as "etcd://127.0.0.1:2379/tenure"
// or "etcd://h1:2379,h2:2379,h3:2379/tenure?ca=/etc/tenure/etcd-ca.pem".
// See the package documentation for the parameters. It makes one read of
// the prefix, bounded by dial_timeout, and fails with a Transient error if
// no server answers, or a Permanent one if TLS fails or the credentials are
// refused or do not allow reading the prefix.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	cfg := NewClientConfig(c.endpoints)
	// The client's own context (Config.Context) is left unset: the
	// client outlives ctx. clientv3.New waits, at most DialTimeout, only
	// to authenticate when there are credentials.
	cfg.DialTimeout = c.dialTimeout
	if c.tls {
		tc, err := tlsutil.LoadClient(c.ca, c.cert, c.key)
		if err != nil {
			return nil, errorf(driver.Permanent, "URL %q: %w", u.Redacted(), err)
		}
		cfg.TLS = tc
		if c.serverName != "" {
			// gRPC sets the TLS server name from the authority of
			// each connection, overriding tls.Config.ServerName.
			tc.ServerName = c.serverName
			cfg.DialOptions = append(cfg.DialOptions, grpc.WithAuthority(c.serverName))
		}
	}
	cfg.Username, cfg.Password = c.username, c.password
	where := strings.Join(c.endpoints, ",")

	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, openError(ctx, err, where, c)
	}

	s, err := New(client, c.prefix)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.closer = client
	if err := s.check(ctx, c.dialTimeout); err != nil {
		_ = s.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The client waits for a connection without saying why
			// none comes: find out, for the message.
			if d := diagnose(ctx, c.endpoints, cfg.TLS); d.err != nil && d.config {
				return nil, errorf(driver.Permanent, "cannot talk to etcd at %s: %w: %w", where, d.err, err)
			} else if d.err != nil {
				err = fmt.Errorf("%w (%v)", err, d.err)
			}
		}
		return nil, openError(ctx, err, where, c)
	}
	return s, nil
}

// diagnosis is what diagnose found: the first failure, and whether the
// configuration is at fault (TLS), as opposed to the network or server.
type diagnosis struct {
	err    error
	config bool
}

// diagnose connects to each endpoint (and with TLS, shakes hands) and
// reports the first failure, if any.
func diagnose(ctx context.Context, endpoints []string, tc *tls.Config) diagnosis {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, ep := range endpoints {
		addr := ep[strings.Index(ep, "://")+3:]
		if d := diagnoseOne(ctx, addr, tc); d.err != nil {
			return d
		}
	}
	return diagnosis{}
}

func diagnoseOne(ctx context.Context, addr string, tc *tls.Config) diagnosis {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return diagnosis{err: err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if tc == nil {
		// A TLS server closes the connection on a plain HTTP/2
		// preface; a plain one answers with its settings.
		_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if err == nil {
			_, err = conn.Read(make([]byte, 1))
		}
		switch {
		case isTimeout(err):
			return diagnosis{err: fmt.Errorf("%s accepted a connection but did not answer", addr)}
		case err != nil:
			return diagnosis{config: true, err: fmt.Errorf(
				"%s closed the connection on a plain-text request: does it want TLS (?tls=true or ?ca=)? %w", addr, err)}
		}
		return diagnosis{}
	}
	c := tc.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c.NextProtos = []string{"h2"}
	tconn := tls.Client(conn, c)
	err = tconn.HandshakeContext(ctx)
	if err == nil {
		// TLS 1.3 reports a refused client certificate only on the
		// first read.
		_, err = tconn.Read(make([]byte, 1))
		if isTimeout(err) {
			err = nil
		}
	}
	if err != nil {
		return diagnosis{config: !isTimeout(err), err: fmt.Errorf("TLS with %s: %w", addr, err)}
	}
	return diagnosis{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// check reads how many keys the prefix holds (one request, no values), to
// find out whether a server answers and the user may read the prefix.
func (s *Store) check(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start, end := s.prefix, clientv3.GetPrefixRangeEnd(s.prefix)
	if start == "" {
		start = "\x00"
	}
	_, err := s.client.Get(requireLeader(ctx), start, clientv3.WithRange(end), clientv3.WithCountOnly())
	return err
}

// openError explains why Open failed.
func openError(ctx context.Context, err error, where string, c urlConfig) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcdstore: open %s: %w", where, errors.Join(ctx.Err(), err))
	}
	user := c.username
	if user == "" {
		user = "(none)"
	}
	switch k := classify(err); {
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(driver.Transient, "no etcd server at %s answered within %v (dial_timeout): %w", where, c.dialTimeout, err)
	case isAuthError(err):
		return errorf(driver.Permanent, "etcd at %s refused user %s access to the prefix %q: check %s and %s, "+
			"and that the user's role may read and write the prefix: %w", where, user, c.prefix, EnvUsername, EnvPassword, err)
	case k == driver.Unknown:
		return errorf(driver.Permanent, "open %s: %w", where, err)
	default:
		return errorf(k, "open %s: %w", where, err)
	}
}

type urlConfig struct {
	endpoints          []string
	prefix             string
	username, password string
	tls                bool
	ca, cert, key      string
	serverName         string
	dialTimeout        time.Duration
}

func parseURL(u *url.URL) (urlConfig, error) {
	bad := func(format string, args ...any) (urlConfig, error) {
		return urlConfig{}, errorf(driver.Permanent, "URL %q: "+format, append([]any{u.Redacted()}, args...)...)
	}
	c := urlConfig{dialTimeout: DefaultDialTimeout}
	if u.Scheme != Scheme {
		return bad("scheme is %q, not %q", u.Scheme, Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no endpoint: want etcd://host:port/prefix")
	}
	if u.Fragment != "" {
		return bad("unexpected fragment %q", u.Fragment)
	}
	if u.User != nil {
		if _, set := u.User.Password(); set {
			return bad("a password does not belong in the URL: set %s", EnvPassword)
		}
		c.username = u.User.Username()
	}
	if c.username == "" {
		c.username = os.Getenv(EnvUsername)
	}
	c.password = os.Getenv(EnvPassword)
	if c.username != "" && c.password == "" {
		return bad("user %q has no password: set %s", c.username, EnvPassword)
	}
	c.prefix = u.Path

	q := u.Query()
	for k, vs := range q {
		if !slices.Contains(params, k) {
			return bad("unknown parameter %q (known: %s)", k, strings.Join(params, ", "))
		}
		if len(vs) > 1 {
			return bad("parameter %q given %d times", k, len(vs))
		}
	}
	c.ca, c.cert, c.key, c.serverName = q.Get("ca"), q.Get("cert"), q.Get("key"), q.Get("server_name")
	c.tls = c.ca != "" || c.cert != "" || c.key != "" || c.serverName != ""
	if v := q.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("tls=%q: want true or false", v)
		}
		if !b && c.tls {
			return bad("tls=false with TLS parameters (ca, cert, key, server_name)")
		}
		c.tls = b
	}
	if (c.cert == "") != (c.key == "") {
		return bad("cert and key go together: a client certificate needs its key")
	}
	if v := q.Get("dial_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("dial_timeout=%q: want a positive duration such as 5s", v)
		}
		c.dialTimeout = d
	}

	scheme := "http://"
	if c.tls {
		scheme = "https://"
	}
	for _, ep := range strings.Split(u.Host, ",") {
		if ep == "" {
			return bad("empty endpoint in %q", u.Host)
		}
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			// No port: the whole of ep is the host.
			host, port = strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]"), DefaultPort
		}
		if host == "" || strings.ContainsAny(host, "/@?#") {
			return bad("endpoint %q: want host:port", ep)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("endpoint %q: bad port %q", ep, port)
		}
		c.endpoints = append(c.endpoints, scheme+net.JoinHostPort(host, port))
	}
	return c, nil
}
