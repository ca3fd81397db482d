package opsserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// The common readiness rules: the store's failures win over what the
// command's view says; starting and stopping are never ready.
func TestOpsStatus(t *testing.T) {
	o := opsserver.NewState("elect", "m1")
	if s := o.Status(); s.Ready || s.Role != "starting" || s.Reason != "connecting to the store" {
		t.Errorf("before start: %+v", s)
	}
	o.Running(func(s opsserver.Status) opsserver.Status { s.Role, s.Leader = "follower", "m2"; return s })
	if s := o.Status(); !s.Ready || s.Role != "follower" || s.Leader != "m2" {
		t.Errorf("running: %+v", s)
	}
	fail := storeCallFailing()
	for range opsserver.StoreFailuresUnready {
		o.Health().Observe(fail)
	}
	if s := o.Status(); s.Ready || !strings.HasPrefix(s.Reason, "store unreachable: ") || s.StoreError == "" {
		t.Errorf("store failing: %+v", s)
	}
	o.Running(func(s opsserver.Status) opsserver.Status { s.Ready, s.Reason = false, "no leader known"; return s })
	if s := o.Status(); s.Ready || !strings.HasPrefix(s.Reason, "store unreachable: ") {
		t.Errorf("store failing, no leader: %+v; want the store named as the reason", s)
	}
	o.SetStopping()
	if s := o.Status(); s.Ready || s.Role != "stopping" {
		t.Errorf("stopping: %+v", s)
	}
}

func storeCallFailing() store.Call {
	return store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: driver.Transient, Err: errors.New("refused")}}
}

// The store counts as unreachable after a few failures in a row; any
// answer, even "not found", resets that; our own cancellations say
// nothing.
func TestStoreHealth(t *testing.T) {
	var h opsserver.StoreHealth
	fail := store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: driver.Transient, Err: errors.New("refused")}}
	for range opsserver.StoreFailuresUnready - 1 {
		h.Observe(fail)
	}
	h.Observe(store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: driver.Canceled, Err: context.Canceled}})
	if err := h.Err(); err != nil {
		t.Fatalf("unreachable after %d failures: %v", opsserver.StoreFailuresUnready-1, err)
	}
	h.Observe(fail)
	if err := h.Err(); err == nil {
		t.Fatalf("reachable after %d failures in a row", opsserver.StoreFailuresUnready)
	}
	// A call that waited out its deadline: the store does not answer,
	// and each such call takes that long; one is enough.
	h.Observe(store.Call{Op: "get"})
	h.Observe(store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: driver.Transient, Err: context.DeadlineExceeded}})
	if err := h.Err(); err == nil {
		t.Fatal("reachable after a call that waited out its deadline")
	}
	for _, k := range []driver.Kind{driver.NotFound, driver.TooLarge} {
		for range opsserver.StoreFailuresUnready {
			h.Observe(fail)
		}
		h.Observe(store.Call{Op: "get", Err: &store.Error{Op: "get", Kind: k, Err: errors.New("an answer")}})
		if err := h.Err(); err != nil {
			t.Fatalf("unreachable after a %v answer: %v", k, err)
		}
	}
}

func TestStoreRetryable(t *testing.T) {
	se := func(k driver.Kind) error {
		return &store.Error{Op: "open", Kind: k, Err: errors.New("x")}
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"transient", se(driver.Transient), true},
		{"throttled, wrapped by the probe", errors.Join(errors.New("rsm: store probe"), se(driver.Throttled)), true},
		{"permanent (missing bucket, refused credentials)", se(driver.Permanent), false},
		{"invalid argument", se(driver.InvalidArgument), false},
		{"not the store's (a bad URL)", store.ErrUnknownScheme, false},
	}
	for _, c := range cases {
		if got := opsserver.StoreRetryable(c.err); got != c.want {
			t.Errorf("%s: retryable %v; want %v", c.name, got, c.want)
		}
	}
}
