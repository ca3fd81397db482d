package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
)

const kvUsage = `Usage:
  tenure kv serve --store URL --peer HOST:PORT [--group NAME] [--listen ADDR] ...
                                   run a node of a kv group and serve its HTTP API
  tenure kv get KEY                print KEY's value (its revisions go to stderr)
  tenure kv put KEY VALUE|-        set KEY (- reads the value from stdin)
  tenure kv del KEY                delete KEY
  tenure kv cas KEY REV VALUE|-    set KEY only if it is at revision REV (0: only if absent)
  tenure kv list [PREFIX]          list keys with their revisions
  tenure kv status                 show the node's view of its group

The client commands take --addr (default $TENURE_KV_ADDR or http://127.0.0.1:7480)
and --json. Run 'tenure kv COMMAND --help' for a command's flags.`

func runKV(ctx context.Context, e *env, args []string) error {
	sub := map[string]func(context.Context, *env, []string) error{
		"serve":  runKVServe,
		"get":    runKVGet,
		"put":    runKVPut,
		"del":    runKVDel,
		"cas":    runKVCAS,
		"list":   runKVList,
		"status": runKVStatus,
	}
	if len(args) == 0 || sub[args[0]] == nil {
		help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help")
		if len(args) > 0 && !help {
			fmt.Fprintf(e.stderr, "tenure kv: unknown subcommand %q\n\n", args[0])
		}
		fmt.Fprintln(e.stderr, kvUsage)
		if help {
			return flag.ErrHelp
		}
		return errUsage
	}
	return sub[args[0]](ctx, e, args[1:])
}

// ---- serve ----

func runKVServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv serve", "kv serve --store URL --peer HOST:PORT [--group NAME] [--listen ADDR] [--id ID] [flags]\n\n"+
		"Runs one node of a replicated kv group whose log and snapshots live in the store, and serves\n"+
		"the HTTP API (GET/PUT/DELETE /v1/kv/KEY, POST /v1/cas, GET /v1/list, GET /v1/status).\n"+
		"SIGINT or SIGTERM leaves the group (a leader steps down) and exits.")
	storeURL := fs.String("store", "", "store URL, e.g. file:///var/lib/tenure or s3://bucket/prefix (required)")
	group := fs.String("group", "kv", "the group's name: its objects live under this prefix in the store")
	listen := fs.String("listen", "127.0.0.1:7480", "address of the HTTP API (plain HTTP: keep it on a trusted network)")
	peer := fs.String("peer", "", "host:port the node's gRPC server listens on for the group's other nodes (required)")
	advertise := fs.String("advertise", "", "host:port the other nodes dial (default --peer, with the port chosen if --peer's is 0)")
	id := fs.String("id", "", "node ID, unique in the group and stable across restarts (default HOSTNAME-ADVERTISE)")
	flush := fs.Duration("flush-interval", 20*time.Millisecond, "FlushInterval: a partial batch is committed this long after its first request (the library's default is S2C's 2s; the CLI's is 20ms, for latency)")
	batchMin := fs.Int("batch-min", rsm.DefaultBatchMinCount, "BatchMinCount: a batch is committed at once when it holds this many requests")
	pipeline := fs.Int("pipeline", rsm.DefaultPipelineDepth, "PipelineDepth: batches in flight to the store at once")
	snapThreshold := fs.Int("snapshot-threshold", rsm.DefaultSnapshotThreshold, "SnapshotThreshold: snapshot and truncate the log after this many entries")
	reqTimeout := fs.Duration("request-timeout", rsm.DefaultRequestTimeout, "RequestTimeout: bound on one command or read")
	heartbeat := fs.Duration("heartbeat", rsm.DefaultHeartbeatInterval, "HeartbeatInterval: the leader synchronizes followers at least this often")
	missed := fs.Int("max-missed-heartbeats", rsm.DefaultMaxMissedHeartbeats, "MaxMissedHeartbeats: a follower checks the store after this many silent intervals")
	leadDelay := fs.Duration("leadership-delay", rsm.DefaultLeadershipDelay, "LeadershipDelay: pause per rank before a follower attempts leadership")
	maxValue := fs.Int("max-value-size", kv.DefaultMaxValueSize, "largest value accepted over HTTP, in bytes")
	tlsDir := fs.String("tls-dir", "", "directory holding ca.pem, node.pem and node-key.pem for the peer RPCs (mutual TLS)")
	tlsCert := fs.String("tls-cert", "", "certificate for the peer RPCs, as server and as client (PEM; with --tls-key and --tls-ca)")
	tlsKey := fs.String("tls-key", "", "key of --tls-cert (PEM)")
	tlsCA := fs.String("tls-ca", "", "CA that signs every node's certificate (PEM)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus /metrics on this address")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *storeURL == "" || *peer == "" {
		fmt.Fprintln(e.stderr, "tenure kv serve: --store and --peer are required")
		fs.Usage()
		return errUsage
	}
	log, err := (&electFlags{logFormat: logFormat, logLevel: logLevel}).logger(e)
	if err != nil {
		return err
	}
	opts := rsm.Options{
		FlushInterval: *flush, BatchMinCount: *batchMin, PipelineDepth: *pipeline,
		SnapshotThreshold: *snapThreshold, RequestTimeout: *reqTimeout,
		HeartbeatInterval: *heartbeat, MaxMissedHeartbeats: *missed, LeadershipDelay: *leadDelay,
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if *maxValue <= 0 {
		return fmt.Errorf("--max-value-size must be positive (got %d)", *maxValue)
	}
	serverTLS, clientTLS, err := kvTLS(*tlsDir, *tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}

	// Listen before touching the store, so a busy port costs nothing.
	peerLn, err := net.Listen("tcp", *peer)
	if err != nil {
		return fmt.Errorf("--peer %s: %w", *peer, err)
	}
	defer peerLn.Close() // the host closes it too; a second close is harmless
	addr, err := advertiseAddr(*advertise, *peer, peerLn.Addr())
	if err != nil {
		return err
	}
	if *id == "" {
		host, _ := os.Hostname()
		*id = strings.ReplaceAll(host+"-"+addr, "/", "_")
	}
	if serverTLS == nil && !loopback(addr) {
		log.Warn("peer RPCs are plaintext: pass --tls-dir or --tls-cert/--tls-key/--tls-ca outside loopback")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hcfg := rsm.HostConfig{ID: *id, Addr: addr, Listener: peerLn, ServerTLS: serverTLS, ClientTLS: clientTLS, Logger: log, Registerer: reg}
	if err := hcfg.Validate(); err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	defer httpLn.Close()
	var metricsLn net.Listener
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return fmt.Errorf("--metrics %s: %w", *metricsAddr, err)
		}
		defer metricsLn.Close()
	}

	st, err := store.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	host, err := rsm.NewHost(ctx, st, hcfg)
	if err != nil {
		return err
	}
	defer host.Close()
	node, err := host.Join(ctx, *group, map[string]rsm.StateMachine{kv.MachineName: kv.New()}, opts)
	if err != nil {
		return err
	}
	h, err := kv.NewHandler(kv.NewClient(node), kv.HandlerOptions{MaxValueSize: *maxValue, Status: node.Status})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(httpLn) }()
	var msrv *http.Server
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- msrv.Serve(metricsLn) }()
	}
	fmt.Fprintf(e.stdout, "tenure kv: node %s of group %q: HTTP API on http://%s, peers dial %s\n", *id, *group, httpLn.Addr(), addr)
	if metricsLn != nil {
		log.Info("serving /metrics", "addr", metricsLn.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("HTTP server: %w", err)
	case <-node.Done():
		// The node stopped on its own: it refused to join (its options
		// disagree with the group's settings, which the error names).
		runErr = fmt.Errorf("group %q: %w", *group, node.Err())
	}
	// Let requests in flight finish (each is bounded by RequestTimeout),
	// then leave: a leader steps down so another node takes over at once.
	sctx, cancel := context.WithTimeout(context.Background(), *reqTimeout+time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if msrv != nil {
		_ = msrv.Close()
	}
	if err := node.Leave(sctx); err != nil {
		log.Warn("leaving the group", "err", err)
	}
	if err := host.Close(); err != nil {
		log.Warn("closing the host", "err", err)
	}
	if runErr == nil {
		fmt.Fprintf(e.stdout, "tenure kv: node %s left group %q\n", *id, *group)
	}
	return runErr
}

// kvTLS loads the peer RPCs' TLS: from a directory, or from three files.
// No flags: plaintext.
func kvTLS(dir, cert, key, ca string) (server, client *tls.Config, err error) {
	if dir != "" {
		if cert != "" || key != "" || ca != "" {
			return nil, nil, errors.New("--tls-dir and --tls-cert/--tls-key/--tls-ca are exclusive")
		}
		cert, key, ca = filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"), filepath.Join(dir, "ca.pem")
	}
	if cert == "" && key == "" && ca == "" {
		return nil, nil, nil
	}
	if cert == "" || key == "" || ca == "" {
		return nil, nil, errors.New("--tls-cert, --tls-key and --tls-ca go together")
	}
	if server, err = tlsutil.LoadServer(cert, key, ca); err != nil {
		return nil, nil, err
	}
	if client, err = tlsutil.LoadClient(ca, cert, key); err != nil {
		return nil, nil, err
	}
	return server, client, nil
}

// advertiseAddr is the address other nodes dial: --advertise, or --peer
// with the port the listener chose.
func advertiseAddr(advertise, peer string, bound net.Addr) (string, error) {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return "", fmt.Errorf("--advertise %q: %w", advertise, err)
		}
		return advertise, nil
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", fmt.Errorf("--peer %q: %w", peer, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("--peer %s listens on every interface: say which address the other nodes dial with --advertise", peer)
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ---- client commands ----

type kvClientFlags struct {
	addr    *string
	asJSON  *bool
	timeout *time.Duration
}

func addKVClientFlags(fs *flag.FlagSet) *kvClientFlags {
	def := os.Getenv("TENURE_KV_ADDR")
	if def == "" {
		def = "http://127.0.0.1:7480"
	}
	return &kvClientFlags{
		addr:    fs.String("addr", def, "the kv server's HTTP address (default: $TENURE_KV_ADDR or http://127.0.0.1:7480)"),
		asJSON:  fs.Bool("json", false, "print the server's JSON response"),
		timeout: fs.Duration("timeout", 30*time.Second, "give up after this long"),
	}
}

// kvHTTP is a client of the kv HTTP API.
type kvHTTP struct {
	base   string
	hc     *http.Client
	e      *env
	asJSON bool
}

func (f *kvClientFlags) client(e *env) (*kvHTTP, error) {
	addr := *f.addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--addr %q: want http://HOST:PORT", *f.addr)
	}
	return &kvHTTP{base: strings.TrimSuffix(u.String(), "/"), hc: &http.Client{Timeout: *f.timeout}, e: e, asJSON: *f.asJSON}, nil
}

// kvResponse is a response of the HTTP API; body is its JSON.
type kvResponse struct {
	status int
	body   []byte
}

// decode decodes the body into v.
func (r kvResponse) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("the server's response (HTTP %d) is not the JSON expected: %v", r.status, err)
	}
	return nil
}

// err is the error a non-2xx response reports.
func (r kvResponse) err() error {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(r.body, &body) != nil || body.Error == "" {
		return fmt.Errorf("HTTP %d: %s", r.status, bytes.TrimSpace(r.body))
	}
	return fmt.Errorf("%s (HTTP %d)", body.Error, r.status)
}

// do sends one request. A 503 whose write was not applied (no leader yet,
// busy) is retried after its Retry-After, a few times. With --json, the
// response's JSON is printed, whatever its status.
func (c *kvHTTP) do(ctx context.Context, method, path string, body []byte) (kvResponse, error) {
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
		if err != nil {
			return kvResponse{}, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return kvResponse{}, fmt.Errorf("cannot reach the kv server at %s (set --addr or TENURE_KV_ADDR): %w", c.base, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return kvResponse{}, fmt.Errorf("reading the response from %s: %w", c.base, err)
		}
		r := kvResponse{status: resp.StatusCode, body: data}
		if r.status == http.StatusServiceUnavailable && attempt < 4 && retryable(method, data) {
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				wait = min(time.Duration(s)*time.Second, 5*time.Second)
			}
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if c.asJSON && json.Valid(data) {
			var out bytes.Buffer
			if json.Indent(&out, data, "", "  ") == nil {
				out.WriteByte('\n')
				_, _ = c.e.stdout.Write(out.Bytes())
			}
		}
		return r, nil
	}
}

// retryable: a read, or a write the server says was not applied.
func retryable(method string, body []byte) bool {
	if method == http.MethodGet {
		return true
	}
	var b struct {
		Outcome string `json:"outcome"`
	}
	return json.Unmarshal(body, &b) == nil && b.Outcome == "not_applied"
}

// keyPath is the API path of key: escaped whole, so that '/' and dot
// segments reach the server intact.
func keyPath(key string) string {
	esc := url.PathEscape(key)
	if key == "." || key == ".." {
		esc = strings.ReplaceAll(esc, ".", "%2E")
	}
	return "/v1/kv/" + esc
}

// kvClientCommand parses a client command's flags and positional
// arguments (between minArgs and maxArgs) and returns a client with the
// timeout applied to ctx.
func kvClientCommand(ctx context.Context, e *env, name, synopsis string, minArgs, maxArgs int, args []string, extra func(*flag.FlagSet)) (context.Context, context.CancelFunc, *kvHTTP, []string, error) {
	fs := newFlags(e, "kv "+name, synopsis)
	cf := addKVClientFlags(fs)
	if extra != nil {
		extra(fs)
	}
	pos, err := parse(fs, args)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		fs.Usage()
		return nil, nil, nil, nil, errUsage
	}
	c, err := cf.client(e)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *cf.timeout)
	return ctx, cancel, c, pos, nil
}

type kvItemJSON struct {
	Key            string `json:"key"`
	Value          []byte `json:"value"`
	Revision       uint64 `json:"revision"`
	CreateRevision uint64 `json:"createRevision"`
}

func runKVGet(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "get", "kv get KEY [--addr URL] [--json]\n\nPrints KEY's value, exactly as stored, to stdout and its revisions to stderr.", 1, 1, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	key := pos[0]
	r, err := c.do(ctx, http.MethodGet, keyPath(key), nil)
	if err != nil {
		return err
	}
	switch {
	case r.status == http.StatusNotFound:
		return fmt.Errorf("key %q not found", key)
	case r.status != http.StatusOK:
		return r.err()
	case c.asJSON:
		return nil
	}
	var it kvItemJSON
	if err := r.decode(&it); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "revision %d (created at %d), %d bytes\n", it.Revision, it.CreateRevision, len(it.Value))
	_, err = e.stdout.Write(it.Value)
	return err
}

// value is a value argument: "-" reads stdin.
func (e *env) value(arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	in := e.stdin
	if in == nil {
		in = os.Stdin
	}
	b, err := io.ReadAll(in)
	if err != nil {
		return nil, fmt.Errorf("reading the value from stdin: %w", err)
	}
	return b, nil
}

func runKVPut(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "put", "kv put KEY VALUE|- [--addr URL] [--json]\n\nSets KEY to VALUE, or to stdin's bytes with -, and prints the write's revision.", 2, 2, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	value, err := e.value(pos[1])
	if err != nil {
		return err
	}
	r, err := c.do(ctx, http.MethodPut, keyPath(pos[0]), value)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return r.err()
	}
	if c.asJSON {
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "revision %d\n", res.Revision)
	return nil
}

func runKVDel(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "del", "kv del KEY [--addr URL] [--json]\n\nDeletes KEY; fails if it does not exist.", 1, 1, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	key := pos[0]
	r, err := c.do(ctx, http.MethodDelete, keyPath(key), nil)
	if err != nil {
		return err
	}
	switch {
	case r.status == http.StatusNotFound:
		return fmt.Errorf("key %q not found", key)
	case r.status != http.StatusOK:
		return r.err()
	case c.asJSON:
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %q at revision %d\n", key, res.Revision)
	return nil
}

func runKVCAS(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "cas", "kv cas KEY REV VALUE|- [--addr URL] [--json]\n\n"+
		"Sets KEY to VALUE only if KEY's revision is REV; REV 0 means only if KEY does not exist.\n"+
		"Exits 1, saying the current revision, if the key has moved on.", 3, 3, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	key := pos[0]
	expect, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return fmt.Errorf("revision %q: want a number (0: the key must not exist)", pos[1])
	}
	value, err := e.value(pos[2])
	if err != nil {
		return err
	}
	body, err := json.Marshal(struct {
		Key            string `json:"key"`
		ExpectRevision uint64 `json:"expectRevision"`
		Value          []byte `json:"value"`
	}{key, expect, value})
	if err != nil {
		return err
	}
	r, err := c.do(ctx, http.MethodPost, "/v1/cas", body)
	if err != nil {
		return err
	}
	if r.status == http.StatusConflict {
		var res struct {
			Revision uint64 `json:"revision"`
		}
		if err := r.decode(&res); err != nil {
			return err
		}
		if res.Revision == 0 {
			return fmt.Errorf("cas failed: key %q does not exist (expected revision %d)", key, expect)
		}
		return fmt.Errorf("cas failed: key %q is at revision %d, not %d", key, res.Revision, expect)
	}
	if r.status != http.StatusOK {
		return r.err()
	}
	if c.asJSON {
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "swapped: revision %d\n", res.Revision)
	return nil
}

func runKVList(ctx context.Context, e *env, args []string) error {
	var limit *int
	var after *string
	var values *bool
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "list", "kv list [PREFIX] [--limit N] [--after KEY] [--values] [--addr URL] [--json]\n\n"+
		"Lists the keys under PREFIX in order with their revisions, fetching pages of at most 1000.", 0, 1, args,
		func(fs *flag.FlagSet) {
			limit = fs.Int("limit", 1000, "list at most this many keys")
			after = fs.String("after", "", "start after this key")
			values = fs.Bool("values", false, "print the values too (quoted)")
		})
	if err != nil {
		return err
	}
	defer cancel()
	if *limit < 1 {
		return fmt.Errorf("--limit must be at least 1 (got %d)", *limit)
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	// Collect the pages, then print once: --json prints one document.
	asJSON := c.asJSON
	c.asJSON = false
	var items []kvItemJSON
	more, next := false, *after
	for len(items) < *limit {
		q := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(min(*limit-len(items), 1000))}}
		if next != "" {
			q.Set("after", next)
		}
		if !*values && !asJSON {
			q.Set("keysOnly", "true")
		}
		r, err := c.do(ctx, http.MethodGet, "/v1/list?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		if r.status != http.StatusOK {
			return r.err()
		}
		var page struct {
			Items []kvItemJSON `json:"items"`
			More  bool         `json:"more"`
			Next  string       `json:"next"`
		}
		if err := r.decode(&page); err != nil {
			return err
		}
		items = append(items, page.Items...)
		more, next = page.More, page.Next
		if !more || len(page.Items) == 0 {
			break
		}
	}
	if asJSON {
		if items == nil {
			items = []kvItemJSON{}
		}
		out := struct {
			Items []kvItemJSON `json:"items"`
			More  bool         `json:"more"`
			Next  string       `json:"next,omitempty"`
		}{items, more, ""}
		if more {
			out.Next = next
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	if *values {
		fmt.Fprintln(w, "KEY\tREVISION\tCREATED\tVALUE")
	} else {
		fmt.Fprintln(w, "KEY\tREVISION\tCREATED")
	}
	for _, it := range items {
		if *values {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", it.Key, it.Revision, it.CreateRevision, strconv.Quote(string(it.Value)))
		} else {
			fmt.Fprintf(w, "%s\t%d\t%d\n", it.Key, it.Revision, it.CreateRevision)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(e.stderr, "more keys follow: continue with --after %s\n", strconv.Quote(next))
	}
	return nil
}

func runKVStatus(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, _, err := kvClientCommand(ctx, e, "status", "kv status [--addr URL] [--json]\n\nShows the node's view of its group: its role, the leader, the term and the apply index.", 0, 0, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	r, err := c.do(ctx, http.MethodGet, "/v1/status", nil)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return r.err()
	}
	if c.asJSON {
		return nil
	}
	var s rsm.Status
	if err := r.decode(&s); err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "group\t%s\n", s.Group)
	fmt.Fprintf(w, "node\t%s\n", s.ID)
	fmt.Fprintf(w, "state\t%s\n", s.State)
	fmt.Fprintf(w, "role\t%s\n", s.Role)
	fmt.Fprintf(w, "term\t%d\n", s.Term)
	if s.LeaderID != "" {
		fmt.Fprintf(w, "leader\t%s at %s\n", s.LeaderID, s.LeaderAddr)
	}
	fmt.Fprintf(w, "apply index\t%d\n", s.ApplyIndex)
	fmt.Fprintf(w, "snapshot index\t%d\n", s.SnapshotIndex)
	for _, f := range s.Followers {
		fmt.Fprintf(w, "follower\t%s at %s, apply index %d\n", f.ID, f.Addr, f.ApplyIndex)
	}
	return w.Flush()
}
