//go:build unix

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/internal/testutil"
)

// tenure elect in this process, its endpoint read from several goroutines
// while it starts, leads and stops (run with -race).
func TestElectEndpointInProcess(t *testing.T) {
	listen := testutil.FreeAddr(t)
	base := "http://" + listen
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	errb := &lockedBuffer{}
	go func() {
		done <- run(ctx, &env{stdout: &lockedBuffer{}, stderr: errb},
			append([]string{"elect", "--lock", tempStore(t) + "/leader.json", "--id", "m1", "--http", listen}, fastFlags...))
	}()
	stopReaders := make(chan struct{})
	var wg sync.WaitGroup
	for _, path := range []string{"/readyz", "/status", "/metrics", "/livez"} {
		wg.Go(func() {
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				_, _ = httpGetQuiet(base+path, "")
			}
		})
	}
	var st opsserver.Status
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := httpGetQuiet(base+"/readyz", "")
		if code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz: %d %s\n%s", code, body, errb.String())
		}
	}
	if !st.Ready || st.Role != "leader" || st.Leader != "m1" || st.Term != 1 || st.Election != nil {
		t.Errorf("/readyz: %+v; want ready, leader m1, term 1, and no detail", st)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	close(stopReaders)
	wg.Wait()
	if code, body := httpGetQuiet(base+"/livez", ""); code != 0 {
		t.Errorf("/livez after exit: %d %s; want the endpoint gone", code, body)
	}
}
