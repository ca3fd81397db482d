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
