package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/store/driver"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want driver.Kind
	}{
		{"canceled", context.Canceled, driver.Canceled},
		{"deadline", context.DeadlineExceeded, driver.Transient},
		{"wrapped deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), driver.Transient},
		{"too many requests", rpctypes.ErrTooManyRequests, driver.Throttled},
		{"too many requests as a status", rpctypes.ErrGRPCRequestTooManyRequests, driver.Throttled},
		{"no leader", rpctypes.ErrNoLeader, driver.Transient},
		{"leader changed", rpctypes.ErrLeaderChanged, driver.Transient},
		{"timeout", rpctypes.ErrTimeout, driver.Transient},
		{"timeout, leader fail", rpctypes.ErrTimeoutDueToLeaderFail, driver.Transient},
		{"timeout, connection lost", rpctypes.ErrTimeoutDueToConnectionLost, driver.Transient},
		{"stopped", rpctypes.ErrStopped, driver.Transient},
		{"unhealthy", rpctypes.ErrUnhealthy, driver.Transient},
		{"invalid auth token", rpctypes.ErrInvalidAuthToken, driver.Transient},
		{"auth old revision", rpctypes.ErrAuthOldRevision, driver.Transient},
		{"permission denied", rpctypes.ErrPermissionDenied, driver.Permanent},
		{"permission denied as a status", rpctypes.ErrGRPCPermissionDenied, driver.Permanent},
		{"auth failed", rpctypes.ErrAuthFailed, driver.Permanent},
		{"user empty", rpctypes.ErrUserEmpty, driver.Permanent},
		{"no space", rpctypes.ErrNoSpace, driver.Permanent},
		{"corrupt", rpctypes.ErrCorrupt, driver.Permanent},
		{"compacted", rpctypes.ErrCompacted, driver.Permanent},
		{"request too large", rpctypes.ErrRequestTooLarge, driver.InvalidArgument},
		{"request too large as a status", rpctypes.ErrGRPCRequestTooLarge, driver.InvalidArgument},
		{"too many ops", rpctypes.ErrTooManyOps, driver.InvalidArgument},
		{"grpc message too large", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437290 vs. 8912896)"), driver.InvalidArgument},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), driver.Transient},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "deadline"), driver.Transient},
		{"grpc canceled", status.Error(codes.Canceled, "client connection is closing"), driver.Canceled},
		{"internal", status.Error(codes.Internal, "frame"), driver.Transient},
		{"unauthenticated", status.Error(codes.Unauthenticated, "x"), driver.Permanent},
		{"unimplemented", status.Error(codes.Unimplemented, "x"), driver.Permanent},
		{"unknown etcd error with a code", rpctypes.ErrGRPCMemberNotFound, driver.Permanent},
		{"wrapped etcd error", fmt.Errorf("op: %w", rpctypes.ErrNoLeader), driver.Transient},
		{"plain error", errors.New("something"), driver.Unknown},
		{"grpc unknown", status.Error(codes.Unknown, "x"), driver.Unknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.err); got != c.want {
				t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

func TestWriteErrorExplains(t *testing.T) {
	cases := []struct {
		err     error
		kind    driver.Kind
		mention string
	}{
		{rpctypes.ErrRequestTooLarge, driver.InvalidArgument, "--max-request-bytes"},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), driver.InvalidArgument, "--max-request-bytes"},
		{rpctypes.ErrNoSpace, driver.Permanent, "NOSPACE"},
		{rpctypes.ErrPermissionDenied, driver.Permanent, "readwrite"},
	}
	for _, c := range cases {
		err := writeError(c.err, 123)
		var de *driver.Error
		if !errors.As(err, &de) || de.Kind != c.kind {
			t.Errorf("writeError(%v) = %v; want a driver error of kind %v", c.err, err, c.kind)
			continue
		}
		if !strings.Contains(err.Error(), c.mention) {
			t.Errorf("writeError(%v) = %q; want it to mention %q", c.err, err, c.mention)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("writeError(%v) lost the client's error from the chain", c.err)
		}
	}
	for _, err := range []error{rpctypes.ErrTooManyRequests, rpctypes.ErrNoLeader, context.Canceled} {
		if got := writeError(err, 1); got != err {
			t.Errorf("writeError(%v) = %v; want it unchanged", err, got)
		}
	}
}
