//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// tenure elect in this process, its endpoint read from several goroutines
// while it starts, leads and stops (run with -race).
func TestElectEndpointInProcess(t *testing.T) {
	listen := freeTCPAddr(t)
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
	var st opsStatus
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

// The common readiness rules: the store's failures win over what the
// command's view says; starting and stopping are never ready.
func TestOpsStatus(t *testing.T) {
	o := newOpsState("elect", "m1")
	if s := o.status(); s.Ready || s.Role != "starting" || s.Reason != "connecting to the store" {
		t.Errorf("before start: %+v", s)
	}
	o.running(func(s opsStatus) opsStatus { s.Role, s.Leader = "follower", "m2"; return s })
	if s := o.status(); !s.Ready || s.Role != "follower" || s.Leader != "m2" {
		t.Errorf("running: %+v", s)
	}
	fail := storeCallFailing()
	for range storeFailuresUnready {
		o.health.observe(fail)
	}
	if s := o.status(); s.Ready || !strings.HasPrefix(s.Reason, "store unreachable: ") || s.StoreError == "" {
		t.Errorf("store failing: %+v", s)
	}
	o.running(func(s opsStatus) opsStatus { s.Ready, s.Reason = false, "no leader known"; return s })
	if s := o.status(); s.Ready || !strings.HasPrefix(s.Reason, "store unreachable: ") {
		t.Errorf("store failing, no leader: %+v; want the store named as the reason", s)
	}
	o.stopping.Store(true)
	if s := o.status(); s.Ready || s.Role != "stopping" {
		t.Errorf("stopping: %+v", s)
	}
}

func storeCallFailing() store.Call {
	return store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: driver.Transient, Err: errors.New("refused")}}
}
