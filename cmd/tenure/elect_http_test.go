package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// lineWatcher is a command's stderr that tells when a line matches.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	re   *regexp.Regexp
	hit  chan []string
	done bool
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done {
		if m := w.re.FindStringSubmatch(w.buf.String()); m != nil {
			w.done = true
			w.hit <- m
		}
	}
	return len(p), nil
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A second member on one host needs nothing but its own --id: when the
// default --http port is taken, elect serves on a free one and says so.
// A port given with --http is never swapped.
func TestElectDefaultHTTPPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:9464")
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatal(err)
	}
	if ln != nil { // else another process holds it: taken all the same
		defer ln.Close()
	}
	lock := tempStore(t) + "/leader.json"

	w := &lineWatcher{re: regexp.MustCompile(`serving HTTP"? addr=(\S+)`), hit: make(chan []string, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: io.Discard, stderr: w}, []string{"elect", "--lock", lock, "--id", "second"})
	}()
	var addr string
	select {
	case m := <-w.hit:
		addr = m[1]
	case code := <-done:
		t.Fatalf("elect exited %d before serving HTTP: %s", code, w)
	}
	if addr == "127.0.0.1:9464" {
		t.Fatalf("elect serves on the taken default port: %s", w)
	}
	if !strings.Contains(w.String(), "the default --http address is taken") {
		t.Errorf("elect did not say why it serves on %s: %s", addr, w)
	}
	resp, err := http.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/livez on %s: %s", addr, resp.Status)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("elect exited %d after SIGTERM's equivalent: %s", code, w)
	}

	// Asked for explicitly, the taken port is an error.
	code, _, errs := runCmd(t, "elect", "--lock", lock, "--id", "third", "--http", "127.0.0.1:9464")
	if code == 0 || !strings.Contains(errs, "--http 127.0.0.1:9464") {
		t.Fatalf("elect --http on a taken port: exit %d, stderr %q", code, errs)
	}
}
