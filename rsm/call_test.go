package rsm_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
)

// echoHandler answers with the name of the node that ran it and the
// request; "fail" makes it fail.
func echoHandler(id string) rsm.CallHandler {
	return func(_ context.Context, req []byte) ([]byte, error) {
		if string(req) == "fail" {
			return nil, errors.New("failed on " + id)
		}
		return append([]byte(id+":"), req...), nil
	}
}

// A call made on a follower runs on the leader and answers with the
// leader's answer; on the leader it runs there; a handler's error comes
// back as a *CallError; a name no handler has is an error, not retried;
// once the leader leaves, the follower's call runs on the new leader.
func TestCallLeader(t *testing.T) {
	_, ha, _, a, b, _ := peerPair(t)
	a.HandleCall("echo", echoHandler("a"))
	b.HandleCall("echo", echoHandler("b"))
	for _, n := range []*rsm.Node{a, b} {
		got, err := n.CallLeader(ctxT(t, 5*time.Second), "echo", []byte("hi"))
		if err != nil || string(got) != "a:hi" {
			t.Errorf("call on %s: %q, %v; want the leader a's answer a:hi", n.Status().ID, got, err)
		}
	}
	_, err := b.CallLeader(ctxT(t, 5*time.Second), "echo", []byte("fail"))
	var ce *rsm.CallError
	if !errors.As(err, &ce) || ce.Name != "echo" || ce.Message != "failed on a" {
		t.Errorf("a failing handler: %v, want a *CallError with the leader's message", err)
	}
	if _, err := b.CallLeader(ctxT(t, 5*time.Second), "nothing", nil); !errors.As(err, &ce) {
		t.Errorf("a call no handler answers: %v, want a *CallError", err)
	}

	if err := ha.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := b.CallLeader(ctxT(t, 20*time.Second), "echo", []byte("again"))
	if err != nil || string(got) != "b:again" {
		t.Errorf("call once a left: %q, %v; want the new leader b's answer", got, err)
	}
}

// A handler that finds its node does not lead has the call asked again;
// while no leader answers, a call fails once its context ends, saying
// so; a node that left fails calls with ErrClosed.
func TestCallLeaderNoLeader(t *testing.T) {
	_, _, hb, a, b, _ := peerPair(t)
	b.HandleCall("echo", echoHandler("b"))
	// a has no handler of that name: registered only on b, which
	// follows, so the leader answers with an error.
	if _, err := b.CallLeader(ctxT(t, 5*time.Second), "echo", nil); err == nil {
		t.Error("a call the leader has no handler for succeeded")
	}
	var calls atomic.Int32
	a.HandleCall("deposed", func(context.Context, []byte) ([]byte, error) {
		calls.Add(1)
		return nil, &rsm.NotLeaderError{}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := b.CallLeader(ctx, "deposed", nil)
	var nl *rsm.NotLeaderError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &nl) {
		t.Errorf("a call no leader answers in time: %v, want one wrapping the deadline and the leader's refusal", err)
	}
	if calls.Load() < 2 {
		t.Errorf("the handler ran %d times, want the call asked again until its deadline", calls.Load())
	}
	if err := hb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CallLeader(ctxT(t, 5*time.Second), "echo", nil); !errors.Is(err, rsm.ErrClosed) {
		t.Errorf("a call on a node that left: %v, want ErrClosed", err)
	}
}
