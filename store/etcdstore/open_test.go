package etcdstore_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/etcdstore"
)

func TestOpenBadURL(t *testing.T) {
	t.Setenv(etcdstore.EnvUsername, "")
	t.Setenv(etcdstore.EnvPassword, "")
	for _, u := range []string{
		"etcd:///prefix",
		"etcd://127.0.0.1:2379/p?bogus=1",
		"etcd://u:secret@127.0.0.1:2379/p",
		"etcd://127.0.0.1:2379/p?cert=/nonexistent.pem",
		"etcd://127.0.0.1:2379/p?ca=/nonexistent/ca.pem",
	} {
		start := time.Now()
		_, err := store.Open(t.Context(), u)
		if !errors.Is(err, store.ErrPermanent) {
			t.Errorf("Open(%q) = %v; want ErrPermanent", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", u, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Open(%q) took %v for a URL it could refuse at once", u, d)
		}
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return strconv.Itoa(port)
}

func TestOpenUnreachable(t *testing.T) {
	cases := map[string]string{
		// Connections are refused at once, and retried until the timeout.
		"refused": "etcd://127.0.0.1:" + closedPort(t) + "/p?dial_timeout=1s",
		// A listener that never answers (a TCP black hole).
		"silent": "etcd://" + silentListener(t) + "/p?dial_timeout=1s",
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			s, err := store.Open(t.Context(), u)
			d := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", u)
			}
			if !errors.Is(err, store.ErrTransient) {
				t.Errorf("Open(%q) = %v; want ErrTransient", u, err)
			}
			if !strings.Contains(err.Error(), "dial_timeout") || !strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("error %q does not name the endpoint and the timeout", err)
			}
			if d > 5*time.Second {
				t.Errorf("Open took %v with dial_timeout=1s", d)
			}
			t.Logf("%v after %v", err, d.Round(time.Millisecond))
		})
	}
}

// silentListener accepts connections and never writes, until the test ends.
func silentListener(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

func TestOpenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	_, err := store.Open(ctx, "etcd://127.0.0.1:"+closedPort(t)+"/p?dial_timeout=10s")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled context = %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Open with a cancelled context took %v", d)
	}
}

// TestOpenURLForms opens the same server through URLs written in different
// ways and checks that they name the same keys.
func TestOpenURLForms(t *testing.T) {
	srv := testutil.Etcd(t)
	prefix := newPrefix()
	host, port, _ := net.SplitHostPort(srv.Endpoint)
	urls := []string{
		"etcd://" + srv.Endpoint + prefix,
		"etcd://" + srv.Endpoint + strings.TrimSuffix(prefix, "/"),
		// The same endpoint twice: a list of endpoints.
		"etcd://" + srv.Endpoint + "," + host + ":" + port + prefix + "?dial_timeout=3s",
	}
	var want string
	for i, u := range urls {
		s, err := store.Open(t.Context(), u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if got := s.Driver().(*etcdstore.Store).Prefix(); got != prefix {
			t.Errorf("Open(%q): prefix %q, want %q", u, got, prefix)
		}
		if i == 0 {
			want, err = s.Put(t.Context(), "k", []byte("x"), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, v, err := s.Get(t.Context(), "k"); err != nil || v != want {
			t.Errorf("Open(%q): Get = %q, %v; want version %s", u, v, err, want)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	// The key is stored under the prefix, as etcdctl would show it.
	resp, err := srv.Client(t).Get(t.Context(), prefix+"k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "x" {
		t.Fatalf("raw Get(%q) = %v, %v", prefix+"k", resp, err)
	}
}

// TestPrefixIsolation checks that stores on nested and neighbouring
// prefixes see only their own keys.
func TestPrefixIsolation(t *testing.T) {
	srv := testutil.Etcd(t)
	base := newPrefix()
	open := func(p string) *store.Store {
		s, err := store.Open(t.Context(), "etcd://"+srv.Endpoint+p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	outer, inner, sibling := open(base+"a"), open(base+"a/b"), open(base+"a-b")
	mustPut(t, outer, "x", "outer", store.IfAbsent())
	mustPut(t, inner, "x", "inner", store.IfAbsent())
	mustPut(t, sibling, "x", "sibling", store.IfAbsent())
	items, err := outer.ListAll(t.Context(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	// The inner store's key is under the outer prefix, as a directory is.
	if strings.Join(keys, " ") != "b/x x" {
		t.Errorf("outer store lists %q; want [b/x x]", keys)
	}
	for s, want := range map[*store.Store]string{inner: "inner", sibling: "sibling"} {
		items, err := s.ListAll(t.Context(), "", 10)
		if err != nil || len(items) != 1 || items[0].Key != "x" {
			t.Errorf("List = %v, %v; want only x", items, err)
		}
		if data, _, err := s.Get(t.Context(), "x"); err != nil || string(data) != want {
			t.Errorf("Get = %q, %v; want %q", data, err, want)
		}
	}
}

// TestTwoClientsRace races create-if-absent and compare-and-swap from two
// stores with clients (connections) of their own, as two processes would.
func TestTwoClientsRace(t *testing.T) {
	srv := testutil.Etcd(t)
	prefix := newPrefix()
	var stores []*store.Store
	for range 2 {
		s, err := store.Open(t.Context(), srv.URL(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	const rounds, perStore = 50, 4
	ctx := t.Context()
	version := ""
	for r := range rounds {
		key := "race/create/" + strconv.Itoa(r)
		var (
			mu      sync.Mutex
			wins    []string
			casWins int
			wg      sync.WaitGroup
		)
		for i := range 2 * perStore {
			s := stores[i%2]
			wg.Go(func() {
				data := "c" + strconv.Itoa(r) + "-" + strconv.Itoa(i)
				if _, err := s.Put(ctx, key, []byte(data), store.IfAbsent()); err == nil {
					mu.Lock()
					wins = append(wins, data)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrPreconditionFailed) {
					t.Errorf("create: %v", err)
				}
				cond := store.IfAbsent()
				if version != "" {
					cond = store.IfMatch(version)
				}
				if _, err := s.Put(ctx, "race/cas", []byte(data), cond); err == nil {
					mu.Lock()
					casWins++
					mu.Unlock()
				} else if !errors.Is(err, store.ErrPreconditionFailed) {
					t.Errorf("swap: %v", err)
				}
			})
		}
		wg.Wait()
		if len(wins) != 1 || casWins != 1 {
			t.Fatalf("round %d: %d creates and %d swaps won; want 1 each", r, len(wins), casWins)
		}
		for _, s := range stores {
			if data, _, err := s.Get(ctx, key); err != nil || string(data) != wins[0] {
				t.Fatalf("round %d: Get = %q, %v; want the winner's %q", r, data, err, wins[0])
			}
		}
		var err error
		if _, version, err = stores[0].Get(ctx, "race/cas"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestValueOverServerLimit(t *testing.T) {
	srv := testutil.Etcd(t)
	s := openOn(t, srv)
	for name, size := range map[string]int{
		// etcd's own check: "etcdserver: request is too large".
		"over --max-request-bytes": srv.MaxRequestBytes + 64<<10,
		// gRPC's receive limit, 512 KiB above it, refuses first.
		"over the gRPC limit": srv.MaxRequestBytes + 2<<20,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Put(t.Context(), "big", make([]byte, size), store.IfAbsent())
			if !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("Put of %d bytes with a %d-byte server limit: %v; want ErrInvalidArgument", size, srv.MaxRequestBytes, err)
			}
			if !strings.Contains(err.Error(), "--max-request-bytes") {
				t.Errorf("error %q does not name the server setting", err)
			}
			t.Log(err)
		})
	}
	if _, _, err := s.Get(t.Context(), "big"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused value was stored: %v", err)
	}
	// Just under the limit fits (the request adds the key and a little
	// framing).
	v := mustPut(t, s, "big", string(make([]byte, srv.MaxRequestBytes-4096)), store.IfAbsent())
	if data, gv, err := s.Get(t.Context(), "big"); err != nil || len(data) != srv.MaxRequestBytes-4096 || gv != v {
		t.Fatalf("Get of a value near the limit: %d bytes, %q, %v", len(data), gv, err)
	}
}
