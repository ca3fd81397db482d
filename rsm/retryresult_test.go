package rsm

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestConcurrentCommandsLostInLeaderChange: a node sends several commands
// at once under its one session; the batch that holds them lands, its
// answer is lost and the leader steps down; the next leader applies it
// while it takes over. Every caller's retry gets its own command's
// result. (The group kept only a session's last result, so all but the
// last caller got ErrApplicationResultUnavailable: seen as
// TestKVColdStartPreparedRuns failing when a loaded machine made its
// leader step down.)
func TestConcurrentCommandsLostInLeaderChange(t *testing.T) {
	const k = 5 // commands in the lost batch
	mem := memstore.New()
	fs := faultstore.New(mem)
	opts := testOptions()
	// One write at a time, batches cut only by the pipeline: the k
	// commands that wait while the first write is held go in one batch.
	opts.PipelineDepth, opts.BatchMinCount, opts.FlushInterval, opts.RequestTimeout = 1, 1000, 30*time.Second, time.Minute
	a := newTestNode(t, fs, "a", opts)
	a.start()
	for a.Status().Role != "LEADER" {
		time.Sleep(time.Millisecond)
	}
	mustCommand(t, a, 1) // registers the session

	// Hold the next log write (one command's batch) until the leader
	// holds that command and the k after it; then let it land, and make
	// the write after it land with its answer lost and reads of the log
	// fail until the leader gives up on it.
	var once sync.Once
	held := make(chan struct{})
	a.hooks.mu.Lock()
	a.hooks.onPut = func(ctx context.Context, key string) {
		if !strings.HasPrefix(key, testGroup+"/log/") {
			return
		}
		once.Do(func() {
			close(held)
			for testutil.ToFloat64(a.m.concurrent.WithLabelValues(testGroup)) < k+1 && ctx.Err() == nil {
				time.Sleep(time.Millisecond) // until the k commands are queued behind this write
			}
			if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpPutCreate, Prefix: testGroup + "/log/", P: 1, Skip: 1, Times: 1, Action: faultstore.ApplyThenFail}); err != nil {
				t.Error(err)
			}
			if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpGet, Prefix: testGroup + "/log/", P: 1, Times: 12, Action: faultstore.Fail, Kind: driver.Transient}); err != nil {
				t.Error(err)
			}
		})
	}
	a.hooks.mu.Unlock()

	type answer struct {
		count uint64
		err   error
	}
	answers := make(chan answer, k+1)
	var wg sync.WaitGroup
	send := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := a.command(t.Context())
			if err != nil {
				answers <- answer{err: err}
				return
			}
			answers <- answer{count: binary.BigEndian.Uint64(res)}
		}()
	}
	send()
	<-held // its write is held: the next k wait for the next batch
	for range k {
		send()
	}
	wg.Wait()
	close(answers)
	var counts []uint64
	for ans := range answers {
		if ans.err != nil {
			t.Errorf("a command of the batch: %v", ans.err)
			continue
		}
		counts = append(counts, ans.count)
	}
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(counts)
	if want := []uint64{2, 3, 4, 5, 6, 7}; !slices.Equal(counts, want) {
		t.Fatalf("the commands returned counts %v, want %v (each applied once, each its own result)", counts, want)
	}
	if got := a.Status().Term; got < 2 {
		t.Fatalf("term %d: the leader should have stepped down and taken leadership again", got)
	}
	if got, _ := fresh(t, mem); got != k+2 {
		t.Fatalf("fresh replica counts %d, want %d", got, k+2)
	}
}
