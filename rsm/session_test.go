package rsm

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// lossyStore loses the answer to the first log write that carries a
// command of machine "c" (it lands; the writer gets a transient error),
// then fails reads of the log until cleared, so the leader cannot settle
// the outcome and steps down with the command in doubt.
type lossyStore struct {
	driver.Store
	mu       sync.Mutex
	armed    bool
	blinding bool
}

func (s *lossyStore) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	v, err := s.Store.Put(ctx, key, data, cond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if index, ok := parseLogKey(testGroup, key); ok && err == nil && s.armed {
		if e, derr := record.DecodeEntry(data, index); derr == nil && len(e.Commands) == 1 && e.Commands[0].Machine == "c" {
			s.armed, s.blinding = false, true
			return "", driver.Errorf(driver.Transient, "lossy: the answer to the write of %s was lost", key)
		}
	}
	return v, err
}

func (s *lossyStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited is how the group's objects are read (bounded).
func (s *lossyStore) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	s.mu.Lock()
	blind := s.blinding && strings.HasPrefix(key, testGroup+"/"+logDir)
	s.mu.Unlock()
	if blind {
		return nil, "", driver.Errorf(driver.Transient, "lossy: reads of the log fail")
	}
	return s.Store.GetLimited(ctx, key, max)
}

func (s *lossyStore) set(armed, blinding bool) {
	s.mu.Lock()
	s.armed, s.blinding = armed, blinding
	s.mu.Unlock()
}

func waitRole(t *testing.T, n *testNode, not string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.Status().Role == not {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still %s", n.host.cfg.ID, not)
		}
		time.Sleep(time.Millisecond)
	}
}

// A command applied, whose answer was lost, retried after another node's
// use of the group evicted its node from the exactly-once table (room for
// one): the retry must not be applied a second time. Its outcome is
// unknown to the node, and it says so.
func TestRetryAfterEvictionIsNotAppliedTwice(t *testing.T) {
	mem := memstore.New()
	ls := &lossyStore{Store: mem}
	opts := testOptions()
	opts.MaxDedupClients = 1
	a := newTestNode(t, ls, "a", opts)
	a.leadInBackground(t)

	ls.set(true, false)
	type outcome struct {
		res []byte
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := a.command(ctx)
		done <- outcome{res, err}
	}()
	waitRole(t, a, "LEADER") // a could not settle its write and stepped down
	ls.set(false, false)

	// b takes over, applies a's command (it landed) and uses the group
	// itself, which evicts a's record.
	b := newTestNode(t, mem, "b", opts)
	b.leadInBackground(t)
	mustCommand(t, b, 2)

	// a leads again; its command is still being retried, now to itself.
	a.leadInBackground(t)
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a's command did not finish")
	}
	if count, _ := freshWith(t, mem, opts); count != 2 {
		t.Fatalf("the group counts %d, want 2: a's retried command was applied twice (its answer: %x, %v)", count, o.res, o.err)
	}
	if !errors.Is(o.err, ErrUnknownOutcome) || !errors.Is(o.err, ErrSessionExpired) {
		t.Fatalf("a's command returned %x, %v; want ErrUnknownOutcome with ErrSessionExpired", o.res, o.err)
	}
	// a goes on under a new session.
	mustCommand(t, a, 3)
}

// A command that was never sent under an expired session is resubmitted
// under a new one, without the caller seeing anything.
func TestCommandAfterSessionExpiredIsResubmitted(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.MaxDedupClients = 1
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	mustCommand(t, a, 1)
	old, _ := a.sessionOf()

	b := newTestNode(t, mem, "b", opts)
	b.leadInBackground(t)
	mustCommand(t, b, 2) // b's session evicts a's
	a.mu.Lock()
	l := a.leader
	a.mu.Unlock()
	l.depose(nil) // an idle leader finds out late; tell it now
	waitRole(t, a, "LEADER")

	a.leadInBackground(t)
	mustCommand(t, a, 3)
	if now, seq := a.sessionOf(); now == old || seq != 1 {
		t.Fatalf("a's session %d seq %d after its session %d expired; want a new one at seq 1", now, seq, old)
	}
	if count, _ := freshWith(t, mem, opts); count != 3 {
		t.Fatalf("the group counts %d, want 3", count)
	}
}

// Concurrent first commands share one registration.
func TestConcurrentCommandsRegisterOnce(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.command(t.Context())
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	registrations, commands := 0, 0
	for i := uint64(1); ; i++ {
		e, err := a.gs.readEntry(t.Context(), i)
		if err != nil {
			break
		}
		for _, c := range e.Commands {
			if c.Register {
				registrations++
			} else {
				commands++
			}
		}
	}
	if registrations != 1 || commands != n {
		t.Fatalf("the log holds %d registrations and %d commands; want 1 and %d", registrations, commands, n)
	}
	if got := a.count(t); got != n {
		t.Fatalf("count %d, want %d", got, n)
	}
}

// A node whose options disagree with the group's recorded settings stops
// and says which setting; its calls return that error.
func TestNodeRefusesOtherSettings(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1)

	opts := testOptions()
	opts.MaxDedupClients = 7
	b := newTestNode(t, mem, "b", opts)
	if b.Err() != nil {
		t.Fatalf("Err before anything happened: %v", b.Err())
	}
	_, _, _ = b.catchUp(t.Context())
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b did not stop")
	}
	var sm *SettingsMismatchError
	if err := b.Err(); !errors.As(err, &sm) || !errors.Is(err, ErrSettingsMismatch) ||
		*sm != (SettingsMismatchError{Setting: "MaxDedupClients", Group: "1000", Node: "7"}) {
		t.Fatalf("Err = %v, want the MaxDedupClients mismatch", err)
	}
	if _, err := b.Command(t.Context(), "c", binary.BigEndian.AppendUint64(nil, 5)); !errors.Is(err, ErrSettingsMismatch) {
		t.Fatalf("Command on the refused node: %v", err)
	}
	mustCommand(t, a, 2)
}
