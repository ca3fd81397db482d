package etcdserver_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
)

// TestErrorMapping: the node's errors, wrapped as the node wraps them,
// become the etcd errors docs/etcd.md lists; the etcd client's own
// conversion (rpctypes.Error) then recognises them.
func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("rsm: command: %w", rsm.ErrUnknownOutcome), rpctypes.ErrGRPCTimeout},
		{fmt.Errorf("%w: %w", rsm.ErrUnknownOutcome, rsm.ErrSessionExpired), rpctypes.ErrGRPCTimeout},
		{fmt.Errorf("rsm: %w", rsm.ErrNotCommitted), rpctypes.ErrGRPCLeaderChanged},
		{rsm.ErrClosed, rpctypes.ErrGRPCStopped},
		{rsm.ErrBusy, rpctypes.ErrGRPCRequestTooManyRequests},
		{fmt.Errorf("x: %w", rsm.ErrTooLarge), rpctypes.ErrGRPCRequestTooLarge},
		{&rsm.CorruptError{Key: "g/log/1", Err: fmt.Errorf("bad")}, rpctypes.ErrGRPCCorrupt},
		{&rsm.DuplicateIDError{ID: "n1"}, rpctypes.ErrGRPCUnhealthy},
		{context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
		{fmt.Errorf("x: %w", context.Canceled), rpctypes.ErrGRPCCanceled},
		{rpctypes.ErrGRPCCompacted, rpctypes.ErrGRPCCompacted},
	} {
		got := etcdserver.ToGRPC(tc.err)
		if got != tc.want { //nolint:errorlint // the status values themselves
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
		if rpctypes.Error(got) != rpctypes.Error(tc.want) { //nolint:errorlint
			t.Errorf("%v: the client sees %v, want %v", tc.err, rpctypes.Error(got), rpctypes.Error(tc.want))
		}
	}
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("x: %w", rsm.ErrApplicationResultUnavailable), codes.Unknown},
		{fmt.Errorf("%w: too long", kv.ErrInvalidKey), codes.InvalidArgument},
		{fmt.Errorf("%w: bad", kv.ErrMalformed), codes.Internal},
	} {
		if got := status.Code(etcdserver.ToGRPC(tc.err)); got != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, got, tc.code)
		}
	}
	// A client's error value for a request refused by the machine.
	if _, ok := rpctypes.Error(rpctypes.ErrGRPCCompacted).(rpctypes.EtcdError); !ok {
		t.Errorf("the client does not turn ErrGRPCCompacted into an EtcdError")
	}
}
