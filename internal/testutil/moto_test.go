package testutil

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMoto(t *testing.T) {
	srv := Moto(t)
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Errorf("endpoint %q is not on loopback", srv.Endpoint)
	}
	if again := Moto(t); again != srv {
		t.Errorf("second call returned %+v, want the shared %+v", again, srv)
	}
	resp, err := http.Get(srv.Endpoint + "/moto-api/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /moto-api/: %s", resp.Status)
	}
}

// The serialising proxy lets one request through at a time.
func TestSerializedLetsOneRequestThroughAtATime(t *testing.T) {
	var inFlight, most atomic.Int32
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(l) }()
	defer backend.Close()

	proxied := MotoServer{Endpoint: "http://" + l.Addr().String()}.Serialized(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(proxied.Endpoint + "/path")
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "/path" {
				t.Errorf("body %q", b)
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d requests reached the server at once, want 1", m)
	}
}

func TestPerCallMotoStopsWithItsTest(t *testing.T) {
	mainActive.Store(false)
	defer mainActive.Store(true)
	var srv MotoServer
	t.Run("inner", func(t *testing.T) {
		srv = Moto(t)
	})
	if srv.Endpoint == "" {
		t.Skip("inner test skipped: moto_server not installed")
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(srv.Endpoint, "http://")); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after its test ended", srv.Endpoint)
	}
}
