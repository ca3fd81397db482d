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
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/internal/bench"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/kvclient"
	"github.com/tenure-io/tenure/rsm/kv/kvserver"
)

const kvUsage = `Usage:
  tenure kv serve --store URL --peer-listen HOST:PORT [--group NAME] [--http ADDR] ...
                                   run a node of a kv group and serve its HTTP API
  tenure kv get KEY                print KEY's value (its revisions go to stderr)
  tenure kv put KEY VALUE|-        set KEY (- reads the value from stdin)
  tenure kv del KEY                delete KEY
  tenure kv cas KEY REV VALUE|-    set KEY only if it is at revision REV (0: only if absent)
  tenure kv list [PREFIX]          list keys with their revisions
  tenure kv status                 show the node's view of its group

The client commands take --server (default $TENURE_KV_ADDR or http://127.0.0.1:7480),
--json, --token-file (default: the token in $TENURE_KV_TOKEN), and for an https://
address --ca and --cert/--key. Run 'tenure kv COMMAND --help' for a command's flags.`

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

const kvServeHelp = "kv serve --store URL --peer-listen HOST:PORT [--group NAME] [--http ADDR] [--id ID] [flags]\n\n" +
	"Runs one node of a replicated kv group whose log and snapshots live in the store, and serves\n" +
	"the HTTP API (GET/PUT/DELETE /v1/kv/KEY, POST /v1/cas, GET /v1/list, GET /v1/status) on --http,\n" +
	"with /status, /metrics (Prometheus) and the probes /livez (200 while the process runs) and /readyz\n" +
	"(200 while the node leads or follows a known leader; else 503 and the reason as JSON; /healthz\n" +
	"is an alias).\n" +
	"A store that cannot be reached at start is retried (the node reports not ready meanwhile);\n" +
	"a permanent store error (missing bucket, refused credentials, bad URL) exits.\n\n" +
	"Security: plain HTTP is served on a loopback --http only, unless --insecure-http. Serve HTTPS\n" +
	"with --http-tls-cert/--http-tls-key; --http-client-ca requires client certificates and\n" +
	"--token-file a bearer token on every request except the probes (so /status and /metrics need them\n" +
	"too; --metrics-http serves /metrics on a second address without them). The peer RPCs are authenticated:\n" +
	"by default with keys each node publishes in the group's records in the store, or with mutual TLS\n" +
	"(--tls-dir or --tls-cert/--tls-key/--tls-ca); --peer-plaintext turns that off on loopback only, and\n" +
	"is refused with --token-file or --http-client-ca (docs/security.md).\n\n" +
	"Give every node of a group the same --max-value-size: the group's RPC message limit follows it.\n" +
	"SIGINT or SIGTERM leaves the group (a leader steps down) and exits."

func runKVServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv serve", kvServeHelp)
	nf := addNodeFlags(fs, "kv")
	listen := fs.String("http", "127.0.0.1:7480", "address of the HTTP API, the probes, /status and /metrics (plain HTTP only on loopback, unless --insecure-http)")
	maxValue := fs.Int("max-value-size", kv.DefaultMaxValueSize, fmt.Sprintf("largest value accepted over HTTP, in bytes, at most %d; the group's MaxMessageSize (the RPC limit) is set to carry it", kv.MaxValueSizeLimit))
	httpCert := fs.String("http-tls-cert", "", "serve the HTTP API over HTTPS with this certificate (PEM; with --http-tls-key)")
	httpKey := fs.String("http-tls-key", "", "key of --http-tls-cert (PEM)")
	httpClientCA := fs.String("http-client-ca", "", "require API clients to present a certificate signed by these CAs (PEM; needs --http-tls-cert; the probes do not)")
	tokenFile := fs.String("token-file", "", "require 'Authorization: Bearer TOKEN' on every request but the probes; the file holds TOKEN, at least 16 bytes")
	insecureHTTP := fs.Bool("insecure-http", false, "serve plain HTTP on an --http address that is not loopback: the API's traffic, and any token, cross the network in clear")
	deprecatedAlias(fs, "listen", "http")
	deprecatedAlias(fs, "peer", "peer-listen")
	deprecatedAlias(fs, "metrics", "metrics-http")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := nf.required(e, "kv serve", pos); err != nil {
		return err
	}
	log, fail, err := nf.logger(e, "kv serve")
	if err != nil {
		return err
	}
	if *maxValue <= 0 {
		return fail(fmt.Errorf("--max-value-size must be positive (got %d)", *maxValue))
	}
	if *maxValue > kv.MaxValueSizeLimit {
		return fail(fmt.Errorf("--max-value-size %d is more than the RPC layer carries: a value travels in one message of at most %d bytes (rsm.MaxMessageSizeLimit), which leaves at most %d bytes (kv.MaxValueSizeLimit) for the value",
			*maxValue, rsm.MaxMessageSizeLimit, kv.MaxValueSizeLimit))
	}
	apiTLS, err := kvAPITLS(*httpCert, *httpKey, *httpClientCA)
	if err != nil {
		return fail(err)
	}
	var token string
	if *tokenFile != "" {
		if token, err = readKVToken(*tokenFile, "--token-file", kvserver.MinTokenLen); err != nil {
			return fail(err)
		}
	}
	ns, err := nf.setup(ctx, log, fail, kv.MessageSize(*maxValue))
	if err != nil {
		return err
	}
	defer ns.host.Listener.Close() // the host closes it too; a second close is harmless
	group := *nf.group
	if apiTLS == nil && !kvserver.Loopback(*listen) {
		log.Warn("the HTTP API is plain HTTP on a non-loopback address (--insecure-http): its traffic and any token cross the network in clear")
	}
	// The server's policy (which port needs what, what the token guards)
	// is kvserver's: its errors name the flags.
	return ns.run(ctx, e, nf, "kv", "HTTP API", kvserver.NodeConfig{
		Server: kvserver.Config{
			HTTPAddr: *listen, TLS: apiTLS, InsecureHTTP: *insecureHTTP, RequireClientCert: *httpClientCA != "", Token: token,
			Peer: ns.host,
			Names: nf.names(map[string]string{"HTTPAddr": "--http", "TLS": "--http-tls-cert and --http-tls-key", "InsecureHTTP": "--insecure-http",
				"RequireClientCert": "--http-client-ca", "Token": "--token-file"}),
		},
		StoreURL: *nf.storeURL, Group: group, Options: ns.opts, MaxValueSize: *maxValue, MetricsAddr: *nf.metricsAddr, Logger: log,
		TuneGC: ns.tuneGC,
	})
}

// kvFilePipelineDepth is kv serve's PipelineDepth on file://. One disk
// takes the writes in turn (each log entry is a new file, fsynced with
// its directory), so batches in flight together are not stored sooner
// than one after the other: a deeper pipeline only splits concurrent
// commands into more, smaller batches, each a log entry to write, a
// file to delete at truncation and a step towards the next snapshot.
// With one batch in flight, commands that arrive meanwhile share the
// next one; a lone command is still written at once. Remote stores
// answer writes in parallel, and there the pipeline hides their latency.
const kvFilePipelineDepth = 1

// kvPipelineDepth is kv serve's default PipelineDepth for the store URL.
func kvPipelineDepth(storeURL string) int {
	if inner, ok := bench.CountedStore(storeURL); ok {
		// tenure bench kv's counting wrapper: the store it wraps.
		return kvPipelineDepth(inner)
	}
	u, err := url.Parse(storeURL)
	if err == nil && u.Scheme == "file" {
		return kvFilePipelineDepth
	}
	return rsm.DefaultPipelineDepth
}

// kvGC is the GOGC kv serve sets, if any: --gc-percent when given, else
// none when the GOGC environment variable is set (the runtime read it),
// else 0: kvserver's policy (NodeConfig.TuneGC).
func kvGC(given bool, flagValue int, lookupEnv func(string) (string, bool)) (int, bool) {
	if given {
		return flagValue, true
	}
	if _, ok := lookupEnv("GOGC"); ok {
		return 0, false
	}
	return 0, true
}

// loggedError is an error the command has already logged: main exits 1
// without printing it again.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

// kvAPITLS loads the HTTP API's TLS (kvserver.APITLS), if the flags ask
// for it.
func kvAPITLS(cert, key, clientCA string) (*tls.Config, error) {
	switch {
	case cert == "" && key == "" && clientCA == "":
		return nil, nil
	case cert == "" || key == "":
		return nil, errors.New("--http-tls-cert and --http-tls-key go together (--http-client-ca needs them)")
	}
	return kvserver.APITLS(cert, key, clientCA)
}

// readKVToken reads a bearer token from file: one word, surrounding
// whitespace trimmed.
func readKVToken(file, flagName string, minLen int) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("%s %s is empty", flagName, file)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("%s %s holds whitespace inside the token; want one word", flagName, file)
	case len(tok) < minLen:
		return "", fmt.Errorf("%s %s: the token is %d bytes; want at least %d (e.g. openssl rand -hex 32)", flagName, file, len(tok), minLen)
	}
	return tok, nil
}

// kvTLS loads the peer RPCs' TLS (kvserver.PeerTLS): from a directory,
// or from three files. No flags: peer keys (rsm's default).
func kvTLS(dir, cert, key, ca string) (server, client *tls.Config, err error) {
	if dir != "" {
		if cert != "" || key != "" || ca != "" {
			return nil, nil, errors.New("--tls-dir and --tls-cert/--tls-key/--tls-ca are exclusive")
		}
		cert, key, ca = kvserver.PeerTLSFiles(dir)
	}
	if cert == "" && key == "" && ca == "" {
		return nil, nil, nil
	}
	if cert == "" || key == "" || ca == "" {
		return nil, nil, errors.New("--tls-cert, --tls-key and --tls-ca go together")
	}
	return kvserver.PeerTLS(cert, key, ca)
}

// advertiseAddr is the address other nodes dial: --advertise, or
// --peer-listen with the port the listener chose.
func advertiseAddr(advertise, peer string, bound net.Addr) (string, error) {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return "", fmt.Errorf("--advertise %q: %w", advertise, err)
		}
		return advertise, nil
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", fmt.Errorf("--peer-listen %q: %w", peer, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("--peer-listen %s listens on every interface: say which address the other nodes dial with --advertise", peer)
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// ---- client commands ----

type kvClientFlags struct {
	server            *string
	asJSON            *bool
	timeout           *time.Duration
	tokenFile         *string
	caFile, cert, key *string
}

func addKVClientFlags(fs *flag.FlagSet) *kvClientFlags {
	def := os.Getenv("TENURE_KV_ADDR")
	if def == "" {
		def = "http://127.0.0.1:7480"
	}
	defer deprecatedAlias(fs, "addr", "server")
	return &kvClientFlags{
		server:    fs.String("server", def, "the kv server's URL, http:// or https:// (default: $TENURE_KV_ADDR or http://127.0.0.1:7480)"),
		asJSON:    fs.Bool("json", false, "print the server's JSON response"),
		timeout:   fs.Duration("timeout", 30*time.Second, "give up after this long"),
		tokenFile: fs.String("token-file", "", "send the bearer token this file holds (default: the token in $TENURE_KV_TOKEN, if set)"),
		caFile:    fs.String("ca", "", "CA certificates that sign an https:// server's certificate (PEM; default: the system's roots)"),
		cert:      fs.String("cert", "", "client certificate, for a server that requires one (PEM; with --key)"),
		key:       fs.String("key", "", "key of --cert (PEM)"),
	}
}

// kvHTTP is a kv client command's client: with --json, it prints each
// response's JSON.
type kvHTTP struct {
	*kvclient.Client
	e      *env
	asJSON bool
}

func (f *kvClientFlags) client(e *env) (*kvHTTP, error) {
	addr := *f.server
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want http://HOST:PORT or https://HOST:PORT", *f.server)
	}
	base, hc := strings.TrimSuffix(u.String(), "/"), &http.Client{Timeout: *f.timeout}
	if (*f.cert == "") != (*f.key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if u.Scheme == "https" {
		cfg, err := tlsutil.LoadClient(*f.caFile, *f.cert, *f.key)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg
		hc.Transport = tr
	} else if *f.caFile != "" || *f.cert != "" {
		return nil, fmt.Errorf("--ca and --cert need an https:// --server (got %s)", base)
	}
	token := strings.TrimSpace(os.Getenv("TENURE_KV_TOKEN"))
	if *f.tokenFile != "" {
		if token, err = readKVToken(*f.tokenFile, "--token-file", 1); err != nil {
			return nil, err
		}
	}
	return &kvHTTP{Client: kvclient.New(base, hc, token), e: e, asJSON: *f.asJSON}, nil
}

// do sends one request (see kvclient.Client.Do). With --json, the
// response's JSON is printed, whatever its status.
func (c *kvHTTP) do(ctx context.Context, method, path string, body []byte) (kvclient.Response, error) {
	r, err := c.Do(ctx, method, path, body)
	var ue *kvclient.UnreachableError
	if errors.As(err, &ue) {
		return r, fmt.Errorf("cannot reach the kv server at %s (set --server or TENURE_KV_ADDR): %w", ue.Server, ue.Err)
	}
	if err != nil {
		return r, err
	}
	if c.asJSON && json.Valid(r.Body) {
		var out bytes.Buffer
		if json.Indent(&out, r.Body, "", "  ") == nil {
			out.WriteByte('\n')
			_, _ = c.e.stdout.Write(out.Bytes())
		}
	}
	return r, nil
}

// argCountRule says, in one line, which arguments the synopsis ("kv put
// KEY VALUE|- [--server URL] …") asks for and which were given.
func argCountRule(synopsis string, got []string) string {
	var want []string
	for _, w := range strings.Fields(strings.SplitN(synopsis, "\n", 2)[0])[2:] {
		if strings.HasPrefix(w, "[--") {
			break
		}
		want = append(want, w)
	}
	if len(want) == 0 {
		return fmt.Sprintf("takes no arguments, got %q", got)
	}
	return fmt.Sprintf("want %s, got %d argument(s) %q", strings.Join(want, " "), len(got), got)
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
	for _, d := range deprecations(fs) {
		fmt.Fprintf(e.stderr, "tenure kv %s: warning: %s\n", name, d)
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		fmt.Fprintf(e.stderr, "tenure kv %s: %s (see tenure kv %s --help)\n", name, argCountRule(synopsis, pos), name)
		return nil, nil, nil, nil, errUsage
	}
	c, err := cf.client(e)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *cf.timeout)
	return ctx, cancel, c, pos, nil
}

func runKVGet(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "get", "kv get KEY [--server URL] [--json]\n\nPrints KEY's value, exactly as stored, to stdout and its revisions to stderr.", 1, 1, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	key := pos[0]
	r, err := c.do(ctx, http.MethodGet, kvclient.KeyPath(key), nil)
	if err != nil {
		return err
	}
	switch {
	case r.Status == http.StatusNotFound:
		return fmt.Errorf("key %q not found", key)
	case r.Status != http.StatusOK:
		return r.Err()
	case c.asJSON:
		return nil
	}
	var it kvclient.Item
	if err := r.Decode(&it); err != nil {
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
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "put", "kv put KEY VALUE|- [--server URL] [--json]\n\nSets KEY to VALUE, or to stdin's bytes with -, and prints the write's revision. A VALUE (or\nKEY) that starts with - goes after --, which ends the flags: tenure kv put KEY -- -1", 2, 2, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	value, err := e.value(pos[1])
	if err != nil {
		return err
	}
	r, err := c.do(ctx, http.MethodPut, kvclient.KeyPath(pos[0]), value)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return r.Err()
	}
	if c.asJSON {
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.Decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "revision %d\n", res.Revision)
	return nil
}

func runKVDel(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "del", "kv del KEY [--server URL] [--json]\n\nDeletes KEY; fails if it does not exist.", 1, 1, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	key := pos[0]
	r, err := c.do(ctx, http.MethodDelete, kvclient.KeyPath(key), nil)
	if err != nil {
		return err
	}
	switch {
	case r.Status == http.StatusNotFound:
		return fmt.Errorf("key %q not found", key)
	case r.Status != http.StatusOK:
		return r.Err()
	case c.asJSON:
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.Decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %q at revision %d\n", key, res.Revision)
	return nil
}

func runKVCAS(ctx context.Context, e *env, args []string) error {
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "cas", "kv cas KEY REV VALUE|- [--server URL] [--json]\n\n"+
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
	if r.Status == http.StatusConflict {
		var res struct {
			Revision uint64 `json:"revision"`
		}
		if err := r.Decode(&res); err != nil {
			return err
		}
		if res.Revision == 0 {
			return fmt.Errorf("cas failed: key %q does not exist (expected revision %d)", key, expect)
		}
		return fmt.Errorf("cas failed: key %q is at revision %d, not %d", key, res.Revision, expect)
	}
	if r.Status != http.StatusOK {
		return r.Err()
	}
	if c.asJSON {
		return nil
	}
	var res struct {
		Revision uint64 `json:"revision"`
	}
	if err := r.Decode(&res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "swapped: revision %d\n", res.Revision)
	return nil
}

func runKVList(ctx context.Context, e *env, args []string) error {
	var limit *int
	var after *string
	var values *bool
	ctx, cancel, c, pos, err := kvClientCommand(ctx, e, "list", "kv list [PREFIX] [--limit N] [--after KEY] [--values] [--server URL] [--json]\n\n"+
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
	var items []kvclient.Item
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
		if r.Status != http.StatusOK {
			return r.Err()
		}
		var page struct {
			Items []kvclient.Item `json:"items"`
			More  bool            `json:"more"`
			Next  string          `json:"next"`
		}
		if err := r.Decode(&page); err != nil {
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
			items = []kvclient.Item{}
		}
		out := struct {
			Items []kvclient.Item `json:"items"`
			More  bool            `json:"more"`
			Next  string          `json:"next,omitempty"`
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
	ctx, cancel, c, _, err := kvClientCommand(ctx, e, "status", "kv status [--server URL] [--json]\n\nShows the node's view of its group: its role, the leader, the term and the apply index.", 0, 0, args, nil)
	if err != nil {
		return err
	}
	defer cancel()
	r, err := c.do(ctx, http.MethodGet, "/v1/status", nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return r.Err()
	}
	if c.asJSON {
		return nil
	}
	var s rsm.Status
	if err := r.Decode(&s); err != nil {
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
	if s.PeerAuth != "" {
		fmt.Fprintf(w, "peer auth\t%s\n", s.PeerAuth)
	}
	fmt.Fprintf(w, "apply index\t%d\n", s.ApplyIndex)
	fmt.Fprintf(w, "snapshot index\t%d\n", s.SnapshotIndex)
	if s.SnapshotBaseBytes > 0 || s.SnapshotSegments > 0 {
		// What a cold start reads: its time follows these.
		fmt.Fprintf(w, "snapshot base\t%d bytes\n", s.SnapshotBaseBytes)
		fmt.Fprintf(w, "snapshot segments\t%d, %d bytes\n", s.SnapshotSegments, s.SnapshotSegmentBytes)
	}
	for _, f := range s.Followers {
		fmt.Fprintf(w, "follower\t%s at %s, apply index %d\n", f.ID, f.Addr, f.ApplyIndex)
	}
	return w.Flush()
}
