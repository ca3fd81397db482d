package election_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
)

// lockedBuffer collects log output written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnreadableRecordIsReportedNotTakenOver: a lock whose term cannot be
// read, or cannot grow, is never taken over, however long it stays
// unchanged: the member reports it (ERROR log, Status) and waits; after an
// operator's repair with a term floor, the next leader gets floor+1.
func TestUnreadableRecordIsReportedNotTakenOver(t *testing.T) {
	s3lect := []byte(`{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2026-11-21T10:30:45Z"}`)
	maxed := election.Record{LeaderID: "old", Session: "s", Nonce: "n", Term: math.MaxUint64}.Encode()
	for _, tc := range []struct {
		name  string
		data  []byte
		want  error
		floor uint64 // 0: cannot be repaired
	}{
		{"corrupt bytes", []byte("\x00garbage{"), election.ErrUnreadableRecord, 7},
		{"no term (S3lect)", s3lect, election.ErrUnreadableRecord, 7},
		{"term at its maximum", maxed, election.ErrTermExhausted, 0},
		{"larger than a record can be", bytes.Repeat([]byte("x"), election.MaxRecordSize+1), election.ErrUnreadableRecord, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs lockedBuffer
				c := newCluster(t, election.Config{})
				if _, err := c.raw.Put(t.Context(), election.DefaultLockfilePath, tc.data, store.IfAbsent()); err != nil {
					t.Fatal(err)
				}
				a := c.add("a", func(cfg *election.Config) {
					cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
				})
				time.Sleep(time.Hour)
				if a.e.IsLeader() {
					t.Fatalf("after an hour: leader with term %d; want the lock left alone", a.e.Term())
				}
				data, _, err := c.raw.Get(t.Context(), election.DefaultLockfilePath)
				if err != nil || !bytes.Equal(data, tc.data) {
					t.Fatalf("the record was changed: %q, %v", data, err)
				}
				st := a.e.Status()
				if st.RecordProblem == "" || st.LastError == "" {
					t.Fatalf("the problem is not in Status: %+v", st)
				}
				if err := a.e.RecordProblem(); !errors.Is(err, tc.want) {
					t.Fatalf("RecordProblem = %v; want %v", err, tc.want)
				}
				if got := logs.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "cannot be taken over") {
					t.Fatalf("the problem was not logged at ERROR:\n%s", got)
				}
				if n := strings.Count(logs.String(), "cannot be taken over"); n != 1 {
					t.Fatalf("the problem was logged %d times; want once per record version", n)
				}
				if tc.floor == 0 {
					if err := election.Repair(t.Context(), c.raw, election.DefaultLockfilePath, math.MaxUint64-1, election.RepairOptions{}); !errors.Is(err, election.ErrTermFloorTooLow) {
						t.Fatalf("repairing a lock at the maximum term = %v; want ErrTermFloorTooLow", err)
					}
					c.stopAll()
					return
				}
				if err := election.Repair(t.Context(), c.raw, election.DefaultLockfilePath, tc.floor, election.RepairOptions{}); err != nil {
					t.Fatalf("Repair: %v", err)
				}
				c.waitLeader(time.Minute)
				if got := a.e.Term(); got != tc.floor+1 {
					t.Fatalf("term after the repair %d; want %d", got, tc.floor+1)
				}
				if st := a.e.Status(); st.RecordProblem != "" || a.e.RecordProblem() != nil {
					t.Fatalf("the problem is still reported after the repair: %+v", st)
				}
				c.stopAll()
			})
		})
	}
}

// TestTermNeverDecreasesAcrossCorruption: leaders reach term 7, the record
// is overwritten with garbage, and a member started afterwards (which has
// seen no term) must not restart the count.
func TestTermNeverDecreasesAcrossCorruption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		prev := c.add("m0", nil)
		c.waitLeader(time.Minute)
		for i := 1; i < 7; i++ {
			prev.stop(t)
			prev = c.add(fmt.Sprintf("m%d", i), nil)
			c.waitLeader(time.Minute)
		}
		if rec, _ := c.lockRecord(); rec.Term != 7 {
			t.Fatalf("term %d; want 7", rec.Term)
		}
		prev.crash(t)
		_, v, err := c.raw.Get(t.Context(), election.DefaultLockfilePath)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.raw.Put(t.Context(), election.DefaultLockfilePath, []byte("{not json"), store.IfMatch(v)); err != nil {
			t.Fatal(err)
		}
		fresh := c.add("fresh", nil)
		time.Sleep(10 * time.Minute)
		if fresh.e.IsLeader() {
			t.Fatalf("a member took the corrupt lock with term %d", fresh.e.Term())
		}
		if err := election.Repair(t.Context(), c.raw, election.DefaultLockfilePath, 7, election.RepairOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitLeader(time.Minute)
		if got := fresh.e.Term(); got != 8 {
			t.Fatalf("term %d after the repair; want 8", got)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestRepair(t *testing.T) {
	key := election.DefaultLockfilePath
	t.Run("refuses a floor below the term", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, election.Config{})
			rec := election.Record{Released: true, Term: 9, Nonce: "n"}
			if _, err := c.raw.Put(t.Context(), key, rec.Encode(), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			if err := election.Repair(t.Context(), c.raw, key, 8, election.RepairOptions{}); !errors.Is(err, election.ErrTermFloorTooLow) {
				t.Fatalf("Repair below the term = %v; want ErrTermFloorTooLow", err)
			}
			for _, floor := range []uint64{0, math.MaxUint64} {
				if err := election.Repair(t.Context(), c.raw, key, floor, election.RepairOptions{}); err == nil {
					t.Fatalf("Repair accepted the floor %d", floor)
				}
			}
			if got, _ := c.lockRecord(); got.Term != 9 {
				t.Fatalf("a refused repair changed the record: %+v", got)
			}
		})
	})
	t.Run("absent lock gets the floor", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, election.Config{})
			if err := election.Repair(t.Context(), c.raw, key, 41, election.RepairOptions{}); err != nil {
				t.Fatal(err)
			}
			a := c.add("a", nil)
			c.waitLeader(time.Minute)
			if a.e.Term() != 42 {
				t.Fatalf("term %d; want 42", a.e.Term())
			}
			c.stopAll()
		})
	})
	t.Run("refuses a record that is still renewed", func(t *testing.T) {
		// A live S3lect leader rewrites its term-less record every 5 s:
		// repairing it would let a tenure member lead beside it.
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, election.Config{})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ctx.Err() == nil; i++ {
					data := fmt.Appendf(nil, `{"leaderID":"s3lect","lastUpdated":"2026-01-01T00:00:%02dZ"}`, i%60)
					_, v, err := c.raw.Get(ctx, key)
					cond := store.IfMatch(v)
					if errors.Is(err, store.ErrNotFound) {
						cond = store.IfAbsent()
					}
					_, _ = c.raw.Put(ctx, key, data, cond)
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
					}
				}
			}()
			time.Sleep(time.Second)
			if err := election.Repair(t.Context(), c.raw, key, 3, election.RepairOptions{}); !errors.Is(err, election.ErrLockInUse) {
				t.Fatalf("Repair of a renewed record = %v; want ErrLockInUse", err)
			}
			cancel()
			<-done
			data, _, _ := c.raw.Get(t.Context(), key)
			if !bytes.Contains(data, []byte("s3lect")) {
				t.Fatalf("a refused repair changed the record: %s", data)
			}
		})
	})
	t.Run("raises the floor of a released lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, election.Config{})
			a := c.add("a", nil)
			c.waitLeader(time.Minute)
			a.stop(t)
			start := time.Now()
			if err := election.Repair(t.Context(), c.raw, key, 100, election.RepairOptions{}); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) != 0 {
				t.Fatalf("repairing a released lock waited %v; a released lock has no holder to wait for", time.Since(start))
			}
			b := c.add("b", nil)
			c.waitLeader(time.Minute)
			if b.e.Term() != 101 {
				t.Fatalf("term %d; want 101", b.e.Term())
			}
			c.stopAll()
		})
	})
}

// Records of other kinds, as tenure writes them now (with a kind field) and
// as the previous version wrote them (without one), and records of kinds
// this version does not know.
var foreignRecords = []struct {
	name, found string
	data        []byte
}{
	{"leader_state.json of the previous version", `without a kind field, with the field "followers"`, []byte(`{
  "term": 3,
  "leaderID": "node-1",
  "leaderAddr": "127.0.0.1:7001",
  "group": "test",
  "incarnation": "5f0c",
  "followers": [],
  "commitIndex": 12,
  "lastUpdated": "2026-11-29T05:00:00Z",
  "nonce": "a93e",
  "counter": 4,
  "checksum": "1c2d3e4f"
}`)},
	{"leader_state.json", `of kind "tenure.rsm.leader_state"`, []byte(`{"kind":"tenure.rsm.leader_state","term":3,"leaderID":"node-1","leaderAddr":"127.0.0.1:7001","followers":[],"commitIndex":12,"nonce":"a93e","counter":4,"checksum":"1c2d3e4f"}`)},
	{"member record of the previous version", `without a kind field, with the field "ownerID"`, []byte(`{"ownerID":"m1","session":"s1","lastUpdated":"2026-11-29T05:00:00Z","leaseMillis":15000,"nonce":"n","counter":2}`)},
	{"member record", `of kind "tenure.lease.member"`, []byte(`{"kind":"tenure.lease.member","ownerID":"m1","session":"s1","leaseMillis":15000,"nonce":"n","counter":2}`)},
	{"assignment record of the previous version", `without a kind field, with the field "epoch"`, []byte(`{"epoch":4,"shards":{"a":{"owner":"m1","session":"s1","term":2}},"updatedBy":"m1","lastUpdated":"2026-11-29T05:00:00Z","nonce":"n"}`)},
	{"assignment record", `of kind "tenure.lease.assignment"`, []byte(`{"kind":"tenure.lease.assignment","epoch":4,"shards":{},"updatedBy":"m1","lastUpdated":"2026-11-29T05:00:00Z","nonce":"n"}`)},
	{"another program's record with a lock's fields", `of kind "com.example.job", which this version does not know`, []byte(`{"kind":"com.example.job","leaderID":"worker-3","term":9,"session":"s","nonce":"n"}`)},
}

// TestDecodeRecordRefusesOtherKinds: a record of another kind, with or
// without a kind field, is refused with an error that says what it is;
// S3lect's lockfile and locks of the previous version (no kind) and of
// this one are accepted.
func TestDecodeRecordRefusesOtherKinds(t *testing.T) {
	for _, tc := range foreignRecords {
		t.Run(tc.name, func(t *testing.T) {
			_, err := election.DecodeRecord(tc.data)
			if !errors.Is(err, election.ErrForeignRecord) || !strings.Contains(err.Error(), tc.found) {
				t.Fatalf("DecodeRecord = %v; want ErrForeignRecord saying it is a record %s", err, tc.found)
			}
		})
	}
	for name, data := range map[string]string{
		"S3lect's lockfile":       `{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2026-11-21T10:30:45Z"}`,
		"previous version's lock": `{"leaderID":"a","leaderAddr":"","lastUpdated":"2026-11-21T10:30:45Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`,
		"this version's lock":     string(election.Record{LeaderID: "a", Term: 7, Session: "s", Nonce: "n"}.Encode()),
	} {
		rec, err := election.DecodeRecord([]byte(data))
		if err != nil || rec.LeaderID == "" {
			t.Errorf("%s: DecodeRecord = %+v, %v; want it accepted", name, rec, err)
		}
	}
	if got := string(election.Record{LeaderID: "a"}.Encode()); !strings.HasPrefix(got, `{"kind":"tenure.lock",`) {
		t.Errorf("Encode = %s; want the kind first", got)
	}
}

// TestForeignRecordIsNeverWritten: a member pointed at another kind of
// record (a group's leader_state.json, which has a leaderID and a term;
// a shard-lease record; another program's) never takes it over, however
// long it stays unchanged, reports it with ErrForeignRecord naming the key
// and what it found, and Repair refuses to replace it: the bytes in the
// store stay as they were.
func TestForeignRecordIsNeverWritten(t *testing.T) {
	key := "kv/test/leader_state.json"
	for _, tc := range foreignRecords {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs lockedBuffer
				c := newCluster(t, election.Config{LockfilePath: key})
				if _, err := c.raw.Put(t.Context(), key, tc.data, store.IfAbsent()); err != nil {
					t.Fatal(err)
				}
				a := c.add("a", func(cfg *election.Config) {
					cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
				})
				time.Sleep(time.Hour)
				if a.e.IsLeader() {
					t.Fatalf("after an hour: leader with term %d; want the record left alone", a.e.Term())
				}
				err := a.e.RecordProblem()
				if !errors.Is(err, election.ErrForeignRecord) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.found) {
					t.Fatalf("RecordProblem = %v; want ErrForeignRecord naming %s and saying it is a record %s", err, key, tc.found)
				}
				if st := a.e.Status(); st.RecordProblem != err.Error() {
					t.Fatalf("Status.RecordProblem = %q; want %q", st.RecordProblem, err)
				}
				if got := logs.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "not a lock record") {
					t.Fatalf("the problem was not logged at ERROR:\n%s", got)
				}
				if err := election.Repair(t.Context(), c.raw, key, 100, election.RepairOptions{}); !errors.Is(err, election.ErrForeignRecord) || !strings.Contains(err.Error(), key) {
					t.Fatalf("Repair = %v; want ErrForeignRecord naming %s", err, key)
				}
				data, _, err := c.raw.Get(t.Context(), key)
				if err != nil || !bytes.Equal(data, tc.data) {
					t.Fatalf("the record was changed: %q, %v", data, err)
				}
				c.stopAll()
			})
		})
	}
}
