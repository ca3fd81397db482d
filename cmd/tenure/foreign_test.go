package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
)

// TestElectNeverTakesOverAGroupsLeaderState: tenure elect pointed, by
// mistake, at a stopped kv group's leader_state.json (it has a leaderID and
// a term) refuses it as not a lock, never writes it, and the group starts
// again with its data; tenure status and tenure lock repair refuse it too.
func TestElectNeverTakesOverAGroupsLeaderState(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--store", "file://" + dir, "--group", "test", "--id", "node-1"}
	addr, stop := startKVServe(t, args...)
	if code, out, errs := runCmd(t, "kv", "put", "greeting", "hello", "--server", addr); code != 0 {
		t.Fatalf("put: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, logs := stop(); code != 0 {
		t.Fatalf("kv serve exited with %d:\n%s", code, logs)
	}
	st, err := store.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	read := func() []byte {
		t.Helper()
		data, _, err := st.Get(t.Context(), "test/leader_state.json")
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	before := read()
	lock := "file://" + dir + "//test/leader_state.json"

	ctx, cancel := context.WithCancel(t.Context())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: &out, stderr: &errb}, append([]string{"elect", "--lock", lock, "--id", "intruder",
			"--no-peer", "--http", ""}, append(fastFlags, "--log-level", "info")...))
	}()
	// Wait for the refusal or for a takeover (the lease is 1 s).
	for deadline := time.Now().Add(30 * time.Second); ; {
		logs := out.String() + errb.String()
		if strings.Contains(logs, "not a lock record") || strings.Contains(logs, "leaderID=intruder") {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("elect neither refused the record nor led within 30 s:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("elect exited with %d", code)
	}
	logs := out.String() + errb.String()
	if !strings.Contains(logs, "not a lock record") || !strings.Contains(logs, "tenure.rsm.leader_state") || !strings.Contains(logs, "test/leader_state.json") {
		t.Errorf("elect did not refuse the group's leader state, naming it and its kind:\n%s", logs)
	}
	if strings.Contains(logs, "leaderID=intruder") {
		t.Errorf("elect led on the group's leader state:\n%s", logs)
	}
	if after := read(); !bytes.Equal(after, before) {
		t.Fatalf("leader_state.json changed:\nbefore %s\nafter  %s", before, after)
	}

	code, _, errs := runCmd(t, "status", lock)
	if code != 1 || !strings.Contains(errs, "is not a lock") || !strings.Contains(errs, "tenure.rsm.leader_state") {
		t.Errorf("status of the group's leader state: exit %d\n%s", code, errs)
	}
	code, _, errs = runCmd(t, "lock", "repair", "--term-floor", "100", "--leader-timeout", "10ms", lock)
	if code != 1 || !strings.Contains(errs, "not a lock record") {
		t.Errorf("lock repair of the group's leader state: exit %d\n%s", code, errs)
	}
	if after := read(); !bytes.Equal(after, before) {
		t.Fatalf("leader_state.json changed:\nbefore %s\nafter  %s", before, after)
	}

	addr, _ = startKVServe(t, args...)
	if code, out, errs := runCmd(t, "kv", "get", "greeting", "--server", addr); code != 0 || out != "hello" {
		t.Fatalf("get after elect: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
