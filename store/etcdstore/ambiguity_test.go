package etcdstore_test

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/etcdstore"
)

// cutProxy forwards TCP connections to an etcd server. Once armed, it
// intercepts the next gRPC response at its HEADERS frame, when the server
// has handled the request, and cuts the connection so that the client
// never learns the answer: the ambiguous outcome of a write whose
// connection breaks at the wrong moment. With answer set, it first sends
// the client a gRPC status of its own in place of the server's answer, as
// an L7 proxy that timed out would.
type cutProxy struct {
	l      net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	answer atomic.Int32 // a grpc-status code to answer with; 0: none

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *cutProxy) serve() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			server.Close()
		})
		p.wg.Go(func() {
			p.forwardFrames(client, server)
			client.Close()
			server.Close()
		})
	}
}

// forwardFrames copies HTTP/2 frames from the server to the client (a
// server sends no preface of its own, only frames) until the proxy is
// armed and a HEADERS frame on a stream comes by.
func (p *cutProxy) forwardFrames(client, server net.Conn) {
	const frameHeaders = 0x1
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(server, hdr); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(server, payload); err != nil {
			return
		}
		stream := (uint32(hdr[5])<<24 | uint32(hdr[6])<<16 | uint32(hdr[7])<<8 | uint32(hdr[8])) & 0x7fffffff
		if hdr[3] == frameHeaders && stream != 0 && p.armed.CompareAndSwap(true, false) {
			p.cuts.Add(1)
			if code := p.answer.Load(); code != 0 {
				_, _ = client.Write(trailersOnly(stream, int(code)))
			}
			return
		}
		if _, err := client.Write(append(hdr, payload...)); err != nil {
			return
		}
	}
}

// TestAmbiguousWriteIsNotHidden cuts the connection after etcd applied a
// conditional write and before its answer arrived. The driver must report
// an ambiguous error, not a precondition failure (which a retried
// transaction would produce against its own first attempt), and
// store.PutResolved must settle the outcome by reading back.
func TestAmbiguousWriteIsNotHidden(t *testing.T) {
	srv := testutil.Etcd(t)
	proxy := newCutProxy(t, srv.Endpoint)
	prefix := newPrefix()
	s, err := store.Open(t.Context(), "etcd://"+proxy.addr()+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	raw := srv.Client(t)
	stored := func(key string) (string, int64) {
		t.Helper()
		resp, err := raw.Get(ctx, prefix+key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return "", 0
		}
		return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
	}

	for _, c := range []struct {
		name string
		cond func(version string) store.Cond
	}{
		{"create", func(string) store.Cond { return store.IfAbsent() }},
		{"swap", store.IfMatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "amb-" + c.name
			v := ""
			if c.name == "swap" {
				v = mustPut(t, s, key, "before", store.IfAbsent())
			}
			proxy.armed.Store(true)
			_, err := s.Put(ctx, key, []byte("landed"), c.cond(v))
			if proxy.cuts.Load() == 0 {
				t.Fatalf("the proxy cut nothing (Put: %v)", err)
			}
			if err == nil {
				t.Fatal("Put succeeded although its answer was cut off")
			}
			if errors.Is(err, store.ErrPreconditionFailed) || !store.IsAmbiguous(err) {
				t.Fatalf("Put whose answer was lost: %v; want an ambiguous error (the client must not retry a transaction)", err)
			}
			if data, _ := stored(key); data != "landed" {
				t.Fatalf("the server holds %q; the cut came after the write applied, so it should hold %q", data, "landed")
			}
			t.Logf("lost answer: %v", err)
		})
	}

	t.Run("PutResolved", func(t *testing.T) {
		before := proxy.cuts.Load()
		proxy.armed.Store(true)
		v, err := store.PutResolved(ctx, s, "resolved", []byte("mine"), store.IfAbsent(), store.ResolveOptions{})
		if proxy.cuts.Load() == before {
			t.Fatal("the proxy cut nothing")
		}
		if err != nil {
			t.Fatalf("PutResolved: %v; want the landed write found by reading back", err)
		}
		data, rev := stored("resolved")
		if data != "mine" || v != etcdVersion(rev) {
			t.Fatalf("PutResolved returned version %s; the server holds %q at revision %d", v, data, rev)
		}

		proxy.armed.Store(true)
		v2, err := store.PutResolved(ctx, s, "resolved", []byte("mine again"), store.IfMatch(v), store.ResolveOptions{})
		if err != nil {
			t.Fatalf("PutResolved(IfMatch): %v", err)
		}
		if data, rev := stored("resolved"); data != "mine again" || v2 != etcdVersion(rev) {
			t.Fatalf("PutResolved returned version %s; the server holds %q at revision %d", v2, data, rev)
		}
	})
}

// trailersOnly returns an HTTP/2 HEADERS frame that ends stream with a gRPC
// status and no message: a trailers-only response. The header block uses
// only literals without indexing, so that it leaves the client's HPACK
// table alone.
func trailersOnly(stream uint32, code int) []byte {
	var block []byte
	for _, f := range [][2]string{
		{":status", "200"},
		{"content-type", "application/grpc"},
		{"grpc-status", strconv.Itoa(code)},
		{"grpc-message", "injected by the test proxy"},
	} {
		// Literal header field without indexing, new name; lengths
		// under 127 fit the 7-bit prefix; no Huffman coding.
		block = append(block, 0x00, byte(len(f[0])))
		block = append(block, f[0]...)
		block = append(block, byte(len(f[1])))
		block = append(block, f[1]...)
	}
	const endStream, endHeaders = 0x1, 0x4
	n := len(block)
	frame := []byte{byte(n >> 16), byte(n >> 8), byte(n), 0x1, endStream | endHeaders,
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
	return append(frame, block...)
}

// TestClientDoesNotRetryTransactions has a proxy answer a transaction that
// etcd applied with DEADLINE_EXCEEDED while the caller's context is still
// live. clientv3's retry interceptor repeats any call that fails that way,
// writes included: the repeat then fails against the first attempt's
// write. The driver's clients (NewClientConfig: MaxUnaryRetries 1) report
// the ambiguous error instead.
func TestClientDoesNotRetryTransactions(t *testing.T) {
	srv := testutil.Etcd(t)
	proxy := newCutProxy(t, srv.Endpoint)
	proxy.answer.Store(int32(codes.DeadlineExceeded))
	ctx := t.Context()

	openWith := func(t *testing.T, cfg clientv3.Config) *store.Store {
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		d, err := etcdstore.New(c, newPrefix())
		if err != nil {
			t.Fatal(err)
		}
		s := store.New(d)
		t.Cleanup(func() { s.Close() })
		// Connect before arming the proxy.
		if _, _, err := s.Get(ctx, "warm-up"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("warm-up Get: %v", err)
		}
		return s
	}
	endpoints := []string{"http://" + proxy.addr()}

	t.Run("driver's client", func(t *testing.T) {
		s := openWith(t, etcdstore.NewClientConfig(endpoints))
		before := proxy.cuts.Load()
		proxy.armed.Store(true)
		_, err := s.Put(ctx, "k", []byte("landed"), store.IfAbsent())
		if proxy.cuts.Load() == before {
			t.Fatalf("the proxy intercepted nothing (Put: %v)", err)
		}
		if err == nil || errors.Is(err, store.ErrPreconditionFailed) || !store.IsAmbiguous(err) {
			t.Fatalf("Put answered DEADLINE_EXCEEDED by a proxy: %v; want an ambiguous error", err)
		}
		if data, _, gerr := s.Get(ctx, "k"); gerr != nil || string(data) != "landed" {
			t.Fatalf("Get = %q, %v; the write applied before the proxy answered", data, gerr)
		}
		t.Logf("reported: %v", err)
	})

	t.Run("client with etcd's default retries", func(t *testing.T) {
		cfg := etcdstore.NewClientConfig(endpoints)
		cfg.MaxUnaryRetries = 0 // clientv3's default: 100
		s := openWith(t, cfg)
		before := proxy.cuts.Load()
		proxy.armed.Store(true)
		_, err := s.Put(ctx, "k", []byte("landed"), store.IfAbsent())
		if proxy.cuts.Load() == before {
			t.Fatalf("the proxy intercepted nothing (Put: %v)", err)
		}
		if !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("with clientv3's default retries, Put = %v; this test expected the hazard that "+
				"NewClientConfig avoids (a retried transaction failing against its own write). "+
				"If clientv3 no longer retries writes, update NewClientConfig and doc.go", err)
		}
		t.Logf("the hazard NewClientConfig avoids: our own write landed, and the retried transaction reported %v", err)
	})
}
