package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
	"github.com/tenure-io/tenure/rsm/kv/kvserver"
)

const etcdUsage = `Usage:
  tenure etcd serve --store URL --peer-listen HOST:PORT [--listen-client-urls URL] ...
                                   run a node of a group and serve etcd's v3 API (etcdctl, the etcd client)

Run 'tenure etcd serve --help' for its flags; docs/etcd.md says what is served.`

func runEtcd(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "serve" {
		help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help")
		if len(args) > 0 && !help {
			fmt.Fprintf(e.stderr, "tenure etcd: unknown subcommand %q\n\n", args[0])
		}
		fmt.Fprintln(e.stderr, etcdUsage)
		if help {
			return flag.ErrHelp
		}
		return errUsage
	}
	return runEtcdServe(ctx, e, args[1:])
}

const etcdServeHelp = "etcd serve --store URL --peer-listen HOST:PORT [--group NAME] [--listen-client-urls URL] [--id ID] [flags]\n\n" +
	"Runs one node of a group whose log and snapshots live in the store, and serves etcd's v3 gRPC API\n" +
	"(KV, Watch, Lease, Maintenance, Cluster), etcd's /version and /health, the probes /livez and /readyz,\n" +
	"/status and /metrics, all on --listen-client-urls: etcdctl and the etcd client work against any node.\n" +
	"A write is acknowledged once it is in the store; no quorum of nodes is needed. docs/etcd.md says\n" +
	"what differs from etcd.\n\n" +
	"Security: plain HTTP (h2c) is served on a loopback client URL only, unless --insecure-http. Serve\n" +
	"https:// with --cert-file/--key-file; --client-cert-auth with --trusted-ca-file requires client\n" +
	"certificates on every request except the probes. The peer RPCs are authenticated as tenure kv\n" +
	"serve's are (docs/security.md).\n\n" +
	"SIGINT or SIGTERM leaves the group (a leader steps down) and exits."

// etcdGRPCOverhead is what etcd allows a request above
// --max-request-bytes for gRPC's framing.
const etcdGRPCOverhead = 512 * 1024

func runEtcdServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "etcd serve", etcdServeHelp)
	nf := addNodeFlags(fs, "etcd")
	listen := fs.String("listen-client-urls", "http://127.0.0.1:2379", "the URL the client port listens on: etcd's gRPC API, /version, /health, the probes, /status and /metrics (one URL; https:// needs --cert-file)")
	advertise := fs.String("advertise-client-urls", "", "comma-separated URLs clients reach this node at, as MemberList reports them (default --listen-client-urls, with the port chosen if its port is 0)")
	certFile := fs.String("cert-file", "", "the client port's certificate (PEM; with --key-file)")
	keyFile := fs.String("key-file", "", "key of --cert-file (PEM)")
	trustedCA := fs.String("trusted-ca-file", "", "CAs that sign client certificates (PEM; with --client-cert-auth)")
	clientCertAuth := fs.Bool("client-cert-auth", false, "require a client certificate signed by --trusted-ca-file on every request but the probes")
	insecureHTTP := fs.Bool("insecure-http", false, "serve plain HTTP on a client URL that is not loopback: the API's traffic crosses the network in clear")
	progress := fs.Duration("watch-progress-notify-interval", 10*time.Minute, "how often a watch that asked for progress notifications and had no events gets one (0: never)")
	maxRequest := fs.Int("max-request-bytes", 3<<19, fmt.Sprintf("largest request accepted, in bytes, at most %d; the group's MaxMessageSize (the RPC limit) is set to carry it", kv.MaxValueSizeLimit))
	deprecatedAlias(fs, "experimental-watch-progress-notify-interval", "watch-progress-notify-interval")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := nf.required(e, "etcd serve", pos); err != nil {
		return err
	}
	log, fail, err := nf.logger(e, "etcd serve")
	if err != nil {
		return err
	}
	lu, err := clientURL(*listen)
	if err != nil {
		return fail(err)
	}
	if *maxRequest <= 0 || *maxRequest > kv.MaxValueSizeLimit {
		return fail(fmt.Errorf("--max-request-bytes must be in [1, %d] (got %d)", kv.MaxValueSizeLimit, *maxRequest))
	}
	if *progress < 0 {
		return fail(fmt.Errorf("--watch-progress-notify-interval must not be negative (got %v)", *progress))
	}
	switch {
	case (*certFile == "") != (*keyFile == ""):
		return fail(errors.New("--cert-file and --key-file go together"))
	case *clientCertAuth && *trustedCA == "":
		return fail(errors.New("--client-cert-auth needs --trusted-ca-file"))
	case *trustedCA != "" && !*clientCertAuth:
		return fail(errors.New("--trusted-ca-file is used with --client-cert-auth only"))
	case lu.Scheme == "https" && *certFile == "":
		return fail(fmt.Errorf("--listen-client-urls %s is https://: give --cert-file and --key-file", *listen))
	case lu.Scheme == "http" && *certFile != "":
		return fail(fmt.Errorf("--cert-file is given: --listen-client-urls should be https:// (got %s)", *listen))
	}
	ca := ""
	if *clientCertAuth {
		ca = *trustedCA
	}
	apiTLS, err := kvAPITLS(*certFile, *keyFile, ca)
	if err != nil {
		return fail(err)
	}
	var urls []string
	if *advertise != "" {
		for _, u := range strings.Split(*advertise, ",") {
			if _, err := clientURL(u); err != nil {
				return fail(fmt.Errorf("--advertise-client-urls: %w", err))
			}
			urls = append(urls, strings.TrimSpace(u))
		}
	}
	ns, err := nf.setup(ctx, log, fail, kv.MessageSize(*maxRequest))
	if err != nil {
		return err
	}
	defer ns.host.Listener.Close() // the host closes it too; a second close is harmless
	group := *nf.group
	if apiTLS == nil && !kvserver.Loopback(lu.Host) {
		log.Warn("the client port is plain HTTP on a non-loopback address (--insecure-http): its traffic crosses the network in clear")
	}
	return ns.run(ctx, e, nf, "etcd", "etcd API", kvserver.NodeConfig{
		Command: "etcd serve",
		Server: kvserver.Config{
			HTTPAddr: lu.Host, TLS: apiTLS, InsecureHTTP: *insecureHTTP, RequireClientCert: *clientCertAuth,
			Peer: ns.host,
			Names: nf.names(map[string]string{"HTTPAddr": "--listen-client-urls", "TLS": "--cert-file and --key-file", "InsecureHTTP": "--insecure-http",
				"RequireClientCert": "--client-cert-auth"}),
		},
		StoreURL: *nf.storeURL, Group: group, Options: ns.opts, MetricsAddr: *nf.metricsAddr, Logger: log,
		TuneGC: ns.tuneGC,
		API: func(node *rsm.Node, m *kv.Machine, apiURL string) (http.Handler, func(), error) {
			adv := urls
			if len(adv) == 0 {
				adv = []string{apiURL}
			}
			s, err := etcdserver.New(etcdserver.Config{Node: node, Machine: m, ClientURLs: adv, ProgressNotifyInterval: *progress, Logger: log})
			if err != nil {
				return nil, nil, err
			}
			h, stop := s.Handler(grpc.MaxRecvMsgSize(*maxRequest+etcdGRPCOverhead), grpc.MaxSendMsgSize(math.MaxInt32),
				// etcd's defaults (--grpc-keepalive-min-time, -interval,
				// -timeout, --max-concurrent-streams): gRPC's own
				// transport serves the port in clear, and its default
				// would send away a client pinging more often than every
				// 5 minutes, as Kubernetes' does every 30 s.
				grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second}),
				grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
				grpc.MaxConcurrentStreams(math.MaxUint32))
			return h, stop, nil
		},
	})
}

// clientURL parses a client URL: http:// or https:// and host:port,
// nothing else.
func clientURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("client URL %q: want http://HOST:PORT or https://HOST:PORT (one URL)", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, fmt.Errorf("client URL %q: %w", s, err)
	}
	return u, nil
}
