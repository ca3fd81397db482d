package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
)

func TestBenchKV(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kv node processes (and etcd when installed) and runs puts for several seconds")
	}
	const seqPuts = 20
	profiles := t.TempDir()
	var stderr strings.Builder
	res, err := KV(t.Context(), KVConfig{Sizes: []int{100, 200}, SeqPuts: seqPuts, Writers: 4, Duration: time.Second,
		FillWriters: 8, ValueSize: 512, Store: "file://" + t.TempDir(), Dir: t.TempDir(), Profile: profiles,
		KVFlags: []string{"--pipeline", "2"}, Etcd: true, Exe: buildTenure(t), PipelineDepth: func(string) int { return 1 },
		Stderr: &stderr})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// Each profile is a gzipped protobuf (pprof's format).
	for _, name := range []string{"kv-100-seq.cpu.pprof", "kv-100-conc.cpu.pprof", "kv-100.heap.pprof", "kv-100-cold.cpu.pprof", "kv-200-conc.cpu.pprof", "kv-200.heap.pprof", "kv-200-cold.cpu.pprof"} {
		b, err := os.ReadFile(filepath.Join(profiles, name))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("profile %s: %d bytes, %v", name, len(b), err)
		}
	}
	if res.ValueSize != 512 || res.SeqPuts != seqPuts || res.Writers != 4 || len(res.Tenure) != 2 || !strings.HasSuffix(res.Options, "; with --pipeline 2") {
		t.Fatalf("header or sizes: %+v", res)
	}
	var acked int64
	for i, ts := range res.Tenure {
		want := []int{100, 200}[i]
		if ts.Keys != want || ts.FillPuts != 100 {
			t.Errorf("size %d: keys %d, fill puts %d", want, ts.Keys, ts.FillPuts)
		}
		checkKVLatency(t, "kv sequential", ts.Seq, seqPuts)
		checkKVLatency(t, "kv concurrent", ts.Conc, 0)
		if ts.MeasuredPuts != int64(ts.Seq.Puts+ts.Conc.Puts) {
			t.Errorf("size %d: measured puts %d, want %d + %d", want, ts.MeasuredPuts, ts.Seq.Puts, ts.Conc.Puts)
		}
		// Every put is one log entry's worth of bytes at least: the value
		// and its key.
		if ts.BytesWritten <= 0 || ts.LogBytesPerPut < 512 || ts.BytesPerPut < ts.LogBytesPerPut+ts.SnapBytesPerPut-1 {
			t.Errorf("size %d: store bytes %d, %.0f/put (log %.0f, snapshot %.0f)", want, ts.BytesWritten, ts.BytesPerPut, ts.LogBytesPerPut, ts.SnapBytesPerPut)
		}
		if ts.BaseBytesPerPut < 0 || ts.BaseBytesPerPut > ts.SnapBytesPerPut {
			t.Errorf("size %d: %.0f base bytes per put, of %.0f snapshot bytes", want, ts.BaseBytesPerPut, ts.SnapBytesPerPut)
		}
		if p := ts.RequestsPerPut["put-create"]; p <= 0 || p > 1.01 {
			t.Errorf("size %d: %.3f create-if-absent puts per put; a batch holds one put or more", want, p)
		}
		acked += int64(ts.FillPuts + ts.Seq.Puts + ts.Conc.Puts)
		if ts.PutsAcknowledged != acked {
			t.Errorf("size %d: %d puts acknowledged in all, want %d", want, ts.PutsAcknowledged, acked)
		}
		// One revision per applied put: none lost, none applied twice.
		if ts.PutsFailed == 0 && ts.Revision != acked || ts.Revision < acked {
			t.Errorf("size %d: revision %d after %d acknowledged puts (%d failed)", want, ts.Revision, acked, ts.PutsFailed)
		}
		if !ts.Cold.ReadOK || ts.Cold.Serving <= 0 || ts.Cold.FirstRead < ts.Cold.Serving || ts.Cold.BytesRead <= 0 || ts.Cold.Requests["get"] <= 0 {
			t.Errorf("size %d: cold start %+v", want, ts.Cold)
		}
		if ts.Snapshots.Count > 0 && (ts.Snapshots.LastBytes <= 0 || ts.Snapshots.WriteMax < ts.Snapshots.WriteMean) {
			t.Errorf("size %d: snapshots %+v", want, ts.Snapshots)
		}
		if runtime.GOOS == "linux" && ts.CPUPerPut <= 0 {
			t.Errorf("size %d: CPU per put %v", want, ts.CPUPerPut)
		}
		if runtime.GOOS == "linux" && (ts.RSS <= 0 || ts.HWM < ts.RSS || ts.Cold.RSS <= 0) {
			t.Errorf("size %d: RSS %d, high-water mark %d, after cold start %d", want, ts.RSS, ts.HWM, ts.Cold.RSS)
		}
		if ts.HeapLive == 0 || ts.RSS > 0 && int64(ts.HeapLive) > ts.RSS {
			t.Errorf("size %d: live heap %d, RSS %d", want, ts.HeapLive, ts.RSS)
		}
		if ts.Data != int64(want)*(14+512) {
			t.Errorf("size %d: data %d bytes, want %d keys of 14 bytes and values of 512", want, ts.Data, want)
		}
		if runtime.GOOS == "linux" && (ts.FillHWM <= 0 || ts.FillHWM > ts.HWM || ts.Cold.HWM < ts.Cold.RSS) {
			t.Errorf("size %d: high-water mark %d after the fill, %d after the phases; cold start RSS %d, high-water %d", want, ts.FillHWM, ts.HWM, ts.Cold.RSS, ts.Cold.HWM)
		}
		// The bandwidth is measured when there are snapshot objects to
		// read; the bound is then the bytes read at that rate plus 1 s.
		if ts.Cold.BandwidthRead > 0 {
			wantBound := time.Duration(float64(ts.Cold.BytesRead)/ts.Cold.ReadBandwidth*float64(time.Second)) + time.Second
			if ts.Cold.ReadBandwidth <= 0 || ts.Cold.Bound != wantBound {
				t.Errorf("size %d: %d bytes read back at %.0f B/s, bound %v, want %v", want, ts.Cold.BandwidthRead, ts.Cold.ReadBandwidth, ts.Cold.Bound, wantBound)
			}
		}
	}
	if res.EtcdSkipped != "" {
		t.Logf("etcd not measured: %s", res.EtcdSkipped)
	} else {
		if len(res.Etcd) != 2 || len(res.Ratios) != 2 {
			t.Fatalf("etcd sizes %d, ratios %d; want 2 each", len(res.Etcd), len(res.Ratios))
		}
		for _, es := range res.Etcd {
			checkKVLatency(t, "etcd sequential", es.Seq, seqPuts)
			checkKVLatency(t, "etcd concurrent", es.Conc, 0)
			if runtime.GOOS == "linux" && es.RSS <= 0 {
				t.Errorf("etcd at %d keys: RSS %d", es.Keys, es.RSS)
			}
		}
		for i, q := range res.Ratios {
			ts, es := res.Tenure[i], res.Etcd[i]
			if q.Keys != ts.Keys || q.SeqP50 != float64(ts.Seq.P50)/float64(es.Seq.P50) || q.Rate != ts.Conc.PutsPerSec/es.Conc.PutsPerSec {
				t.Errorf("ratio %+v does not match kv %+v and etcd %+v", q, ts.Seq, es.Seq)
			}
		}
	}

	var text bytes.Buffer
	if err := res.Print(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kv store: put latency", "store B/put", "cold read", "   200 ", "HWM / data", "read MiB/s", "bound"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, text.String())
		}
	}
}

func checkKVLatency(t *testing.T, what string, l kvLatency, count int) {
	t.Helper()
	if count > 0 && l.Puts+l.Failed != count || l.Puts == 0 {
		t.Errorf("%s: %d puts acknowledged and %d failed, want %d in all", what, l.Puts, l.Failed, count)
	}
	if !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max) || l.PutsPerSec <= 0 {
		t.Errorf("%s: p50 %v, p99 %v, max %v, %.1f puts/s", what, l.P50, l.P99, l.Max, l.PutsPerSec)
	}
	if l.SnapPuts > l.Puts || l.SnapMax > l.Max || l.QuietMax > l.Max || l.SnapPuts < l.Puts && l.QuietP99 == 0 {
		t.Errorf("%s: %d of %d puts during snapshots, max %v; quiet p99 %v, max %v", what, l.SnapPuts, l.Puts, l.SnapMax, l.QuietP99, l.QuietMax)
	}
}

func TestKVSummarizeSnapshotWindows(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	samples := []kvSample{
		{ms(0), ms(10)},    // before the snapshot
		{ms(15), ms(100)},  // overlaps the capture, which precedes the write
		{ms(120), ms(130)}, // inside the write
		{ms(200), ms(205)}, // after
	}
	snaps := []kvSnapEvent{{Captured: ms(20), Start: ms(110), End: ms(150), Bytes: 1}}
	l := kvSummarize(samples, 1, 2, time.Second, snaps)
	if l.Puts != 4 || l.Failed != 1 || l.SnapPuts != 2 || l.SnapMax != 85*time.Millisecond || l.QuietMax != 10*time.Millisecond || l.Max != 85*time.Millisecond {
		t.Errorf("with the capture known: %+v", l)
	}
	// Without the capture, the window is the write alone.
	snaps[0].Captured = 0
	if l := kvSummarize(samples, 0, 2, time.Second, snaps); l.SnapPuts != 1 || l.SnapMax != 10*time.Millisecond {
		t.Errorf("write only: %+v", l)
	}
}

func TestKVTrackerCapture(t *testing.T) {
	tr := &kvTracker{logEnd: map[uint64]int64{}}
	at := func(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }
	for i := 1; i <= 5; i++ {
		tr.put("g/log/"+strings.Repeat("0", 19)+string(rune('0'+i)), 10, at(i*10), at(i*10+5))
	}
	tr.put("g/snapshot", 1000, at(100), at(120))
	tr.put("g/leader_state.json", 7, at(121), at(122))
	tr.put("g/snap/b00000000000000000004-00000000000000000002-ab/00000", 300, at(90), at(95))
	tr.put("g/snap/s00000000000000000002-ab-00000000000000000004", 200, at(96), at(97))
	// The truncation after the snapshot deletes entries 1 to 4: the state
	// was captured after entry 4, written at 45ms.
	for i := 1; i <= 4; i++ {
		tr.deleted("g/log/" + strings.Repeat("0", 19) + string(rune('0'+i)))
	}
	s := tr.snapshots
	if len(s) != 1 || s[0].EndIndex != 4 || s[0].Captured != at(45).UnixNano() || s[0].Bytes != 1000 {
		t.Fatalf("snapshots %+v", s)
	}
	if from, to := s[0].window(); from != at(45).UnixNano() || to != at(120).UnixNano() {
		t.Errorf("window %d..%d", from, to)
	}
	st := tr.st
	if st.LogPuts != 5 || st.LogBytes != 50 || st.SnapshotPuts != 3 || st.SnapshotBytes != 1500 || st.BaseBytes != 300 ||
		st.OtherPuts != 1 || st.OtherBytes != 7 || st.PutBytes != 1557 {
		t.Errorf("counts %+v", st)
	}
	if len(tr.logEnd) != 1 {
		t.Errorf("%d log entries remembered after the truncation, want 1", len(tr.logEnd))
	}
}

func TestProcCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Burn some CPU so that at least one clock tick is counted.
	before := procCPU(os.Getpid())
	deadline := time.Now().Add(100 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	after := procCPU(os.Getpid())
	if after <= 0 || after < before {
		t.Fatalf("CPU time %v, then %v after burning 100ms", before, after)
	}
	if procCPU(-1) != 0 {
		t.Error("a process that does not exist has CPU time")
	}
}

func TestKVDataBytes(t *testing.T) {
	for _, c := range []struct {
		n, value int
		want     int64
	}{
		{0, 1024, 0},
		{100_000, 1024, 100_000 * (14 + 1024)},
		{1_000_000, 1024, 1_000_000 * (14 + 1024)},
		{100_000_005, 1, 100_000_005*15 + 5}, // the 5 keys from 10^8 on have 9 digits
	} {
		if got := kvDataBytes(c.n, c.value); got != c.want {
			t.Errorf("kvDataBytes(%d, %d) = %d, want %d", c.n, c.value, got, c.want)
		}
	}
	if len(KVKey(99_999_999)) != 14 || len(KVKey(100_000_000)) != 15 {
		t.Fatalf("kvKey widths changed: %q %q", KVKey(99_999_999), KVKey(100_000_000))
	}
}

func TestReadObjects(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var want int64
	for i := range 20 {
		data := bytes.Repeat([]byte{byte(i)}, 1000+i)
		if _, err := st.Put(ctx, fmt.Sprintf("g/snap/%02d", i), data, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		want += int64(len(data))
	}
	if _, err := st.Put(ctx, "g/log/1", make([]byte, 5000), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	n, d, err := readObjects(ctx, st, "g/snap/", 8)
	if err != nil || n != want || d <= 0 {
		t.Fatalf("read %d bytes in %v (%v), want %d", n, d, err, want)
	}
}
