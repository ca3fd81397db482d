package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
)

func TestLockRepair(t *testing.T) {
	name := uniqueMem(t, "repair")
	url := name + "/leader.json"
	s, err := store.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	// A record as S3lect writes it: no term.
	if _, err := s.Put(t.Context(), "leader.json", []byte(`{"leaderID":"old","leaderAddr":"h:1","lastUpdated":"2026-01-01T00:00:00Z"}`), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "status", url)
	if code != 1 || !strings.Contains(errs, "cannot be taken over") || !strings.Contains(errs, "tenure lock repair --term-floor N "+url) {
		t.Fatalf("status of a term-less record: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCmd(t, "status", url, "--json")
	if code != 1 || !strings.Contains(out, `"problem"`) {
		t.Fatalf("status --json of a term-less record: exit %d\n%s", code, out)
	}

	for _, bad := range [][]string{
		{"lock", "repair", url},
		{"lock", "repair", "--term-floor", "0", url},
		{"lock", "repair", "--term-floor", "-3", url},
		{"lock", "repair", "--term-floor", "18446744073709551615", url},
		{"lock", "repair", "--term-floor", "5", "--leader-timeout", "0s", url},
		{"lock", "fix", url},
	} {
		if code, _, errs := runCmd(t, bad...); code != 2 {
			t.Errorf("%v: exit %d; want 2 (usage)\n%s", bad, code, errs)
		}
	}

	code, out, errs = runCmd(t, "lock", "repair", "--term-floor", "7", "--leader-timeout", "10ms", url)
	if code != 0 || !strings.Contains(out, "the next leader gets term 8") {
		t.Fatalf("lock repair: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCmd(t, "status", url)
	if code != 0 || !strings.Contains(out, "term     7") || !strings.Contains(out, "released") {
		t.Fatalf("status after the repair: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCmd(t, "lock", "repair", "--term-floor", "9", "--leader-timeout", "10ms", "--json", url)
	if code != 0 || strings.ReplaceAll(out, " ", "") != "{\n\"lock\":\""+url+"\",\n\"nextTerm\":10,\n\"term\":9\n}\n" {
		t.Fatalf("lock repair --json: exit %d\n%s%s", code, out, errs)
	}
	// The term is readable now: a lower floor would make terms go back.
	code, _, errs = runCmd(t, "lock", "repair", "--term-floor", "3", "--leader-timeout", "10ms", url)
	if code != 1 || !strings.Contains(errs, "below the lock's term") {
		t.Fatalf("repair below the term: exit %d\n%s", code, errs)
	}
}

func TestElectMetricReportsRecordProblem(t *testing.T) {
	name := uniqueMem(t, "problem")
	s, err := store.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(t.Context(), "leader.json", []byte("\x00not a record"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	m := newElectMetrics()
	el, err := election.New(t.Context(), election.Config{Store: s, LockfilePath: "leader.json", ServerID: "a", Registerer: m.reg,
		FrequentInterval: 100 * time.Millisecond, InfrequentInterval: 500 * time.Millisecond,
		LeaderTimeout: time.Second, RenewDeadline: 600 * time.Millisecond, RetrySchedule: []time.Duration{0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := el.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer el.Stop(t.Context())
	for deadline := time.Now().Add(30 * time.Second); el.Status().RecordProblem == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the elector did not report the corrupt record within 30 s")
		}
	}
	want := "# HELP tenure_election_record_problem 1 while the lock record cannot be taken over: its term cannot be read or is at its maximum (repair it with tenure lock repair), or it is another kind of record (give the election a key of its own).\n" +
		"# TYPE tenure_election_record_problem gauge\ntenure_election_record_problem{id=\"a\",lock=\"leader.json\"} 1\n"
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "tenure_election_record_problem"); err != nil {
		t.Fatal(err)
	}
}
