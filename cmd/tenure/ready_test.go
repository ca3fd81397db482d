package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// A member that cannot take a lock over because its record is broken says
// so in /readyz, not only in /status.
func TestReadinessNamesABrokenLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.New(memstore.New())
		// A record without a term: no member may take it over.
		if _, err := st.Put(t.Context(), "leader.json", []byte(`{"leaderID":"old","leaderAddr":"","lastUpdated":"2026-01-01T00:00:00Z"}`), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		el, err := election.New(t.Context(), election.Config{Store: st, ServerID: "a", SkipProbe: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		// The record's lease runs out unchanged: the member judges it
		// and finds it cannot be taken over.
		time.Sleep(2 * election.DefaultLeaderTimeout)
		synctest.Wait()
		if el.RecordProblem() == nil {
			t.Fatal("the member found no problem with a record that has no term")
		}
		s := electionView(el)(opsserver.Status{Ready: true})
		if s.Ready || !strings.Contains(s.Reason, "tenure lock repair") || !strings.Contains(s.Reason, el.RecordProblem().Error()) {
			t.Fatalf("readiness %v %q; want not ready, naming the record's problem and the repair", s.Ready, s.Reason)
		}
		t.Logf("readiness: %s", s.Reason)
		cancel()
		<-done
	})
}

// A member pointed at another kind of record (a kv group's
// leader_state.json) says so in /readyz, and does not advise a repair
// that would refuse it.
func TestReadinessNamesAForeignRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.New(memstore.New())
		if _, err := st.Put(t.Context(), "leader.json", []byte(`{"kind":"tenure.rsm.leader_state","term":3,"leaderID":"node-1","leaderAddr":"h:1","followers":[],"commitIndex":9,"nonce":"n","counter":2,"checksum":"00000000"}`), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		el, err := election.New(t.Context(), election.Config{Store: st, ServerID: "a", SkipProbe: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		time.Sleep(2 * election.DefaultLeaderTimeout)
		synctest.Wait()
		s := electionView(el)(opsserver.Status{Ready: true})
		if s.Ready || !strings.Contains(s.Reason, "another kind of record") || !strings.Contains(s.Reason, "tenure.rsm.leader_state") || strings.Contains(s.Reason, "repair") {
			t.Fatalf("readiness %v %q; want not ready, naming the record's kind and no repair", s.Ready, s.Reason)
		}
		cancel()
		<-done
	})
}

// A follower told by the member its record names that it does not lead is
// not ready, whatever the record says, and says why.
func TestReadinessLeaderNotLeading(t *testing.T) {
	cases := []struct {
		name   string
		status election.Status
		ready  bool
		reason string
	}{
		{"follows a leader", election.Status{ServerID: "b", LeaderID: "a", Mode: "peer"}, true, ""},
		{"the leader says it does not lead", election.Status{ServerID: "b", LeaderID: "a", Mode: "frequent", LeaderNotLeading: true}, false, "a answered that it does not lead"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := electionStatusView(c.status, nil)(opsserver.Status{Ready: true})
			if s.Ready != c.ready || !strings.Contains(s.Reason, c.reason) {
				t.Fatalf("ready %v %q; want %v naming %q", s.Ready, s.Reason, c.ready, c.reason)
			}
		})
	}
}
