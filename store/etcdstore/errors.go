package etcdstore

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/store/driver"
)

// etcdKinds classifies the server's own errors, which the client returns as
// rpctypes.EtcdError values. An error not listed falls through to its gRPC
// code (codeKinds).
var etcdKinds = map[error]driver.Kind{
	rpctypes.ErrTooManyRequests: driver.Throttled,

	rpctypes.ErrNoLeader:                   driver.Transient,
	rpctypes.ErrNotLeader:                  driver.Transient,
	rpctypes.ErrLeaderChanged:              driver.Transient,
	rpctypes.ErrStopped:                    driver.Transient,
	rpctypes.ErrTimeout:                    driver.Transient,
	rpctypes.ErrTimeoutDueToLeaderFail:     driver.Transient,
	rpctypes.ErrTimeoutDueToConnectionLost: driver.Transient,
	rpctypes.ErrTimeoutWaitAppliedIndex:    driver.Transient,
	rpctypes.ErrUnhealthy:                  driver.Transient,
	rpctypes.ErrNotCapable:                 driver.Transient, // a member still upgrading
	// The client fetches a new token when it sees these; the next request
	// carries it. The request itself was refused before it was applied.
	rpctypes.ErrInvalidAuthToken: driver.Transient,
	rpctypes.ErrAuthOldRevision:  driver.Transient,

	rpctypes.ErrAuthFailed:           driver.Permanent,
	rpctypes.ErrAuthNotEnabled:       driver.Permanent,
	rpctypes.ErrPermissionDenied:     driver.Permanent,
	rpctypes.ErrPermissionNotGranted: driver.Permanent,
	rpctypes.ErrRoleNotGranted:       driver.Permanent,
	rpctypes.ErrUserEmpty:            driver.Permanent,
	rpctypes.ErrUserNotFound:         driver.Permanent,
	rpctypes.ErrRoleNotFound:         driver.Permanent,
	rpctypes.ErrInvalidAuthMgmt:      driver.Permanent,
	// The database is over its quota and the cluster refuses writes until
	// an operator compacts, defragments and disarms the NOSPACE alarm.
	rpctypes.ErrNoSpace:           driver.Permanent,
	rpctypes.ErrCorrupt:           driver.Permanent,
	rpctypes.ErrClusterIDMismatch: driver.Permanent,
	rpctypes.ErrCompacted:         driver.Permanent,
	rpctypes.ErrFutureRev:         driver.Permanent,

	rpctypes.ErrRequestTooLarge:   driver.InvalidArgument,
	rpctypes.ErrEmptyKey:          driver.InvalidArgument,
	rpctypes.ErrTooManyOps:        driver.InvalidArgument,
	rpctypes.ErrDuplicateKey:      driver.InvalidArgument,
	rpctypes.ErrInvalidSortOption: driver.InvalidArgument,
}

// codeKinds classifies gRPC status codes that no etcd error above named.
var codeKinds = map[codes.Code]driver.Kind{
	codes.Canceled:         driver.Canceled,
	codes.DeadlineExceeded: driver.Transient,
	codes.Unavailable:      driver.Transient,
	codes.Internal:         driver.Transient,
	codes.Aborted:          driver.Transient,
	// grpc-go answers with ResourceExhausted when a message is over a
	// size limit, the client's send limit or the server's receive limit
	// (etcd's --max-request-bytes plus 512 KiB). etcd's own throttling
	// (ErrTooManyRequests) is classified above.
	codes.ResourceExhausted:  driver.InvalidArgument,
	codes.InvalidArgument:    driver.InvalidArgument,
	codes.OutOfRange:         driver.InvalidArgument,
	codes.Unauthenticated:    driver.Permanent,
	codes.PermissionDenied:   driver.Permanent,
	codes.FailedPrecondition: driver.Permanent,
	codes.Unimplemented:      driver.Permanent,
	codes.DataLoss:           driver.Permanent,
	codes.NotFound:           driver.Permanent,
	codes.AlreadyExists:      driver.Permanent,
}

// classify maps an error from the etcd client to a driver.Kind.
func classify(err error) driver.Kind {
	switch {
	case err == nil:
		return driver.Unknown
	case errors.Is(err, context.Canceled):
		return driver.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Transient
	}
	if k, ok := etcdKinds[etcdError(err)]; ok {
		return k
	}
	if c, ok := grpcCode(err); ok {
		if k, ok := codeKinds[c]; ok {
			return k
		}
	}
	return driver.Unknown
}

// grpcCode returns the gRPC code of err: an EtcdError's, or a status
// error's. ok is false for errors that carry none.
func grpcCode(err error) (c codes.Code, ok bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code(), true
	}
	return codes.Unknown, false
}

// etcdError returns the rpctypes.EtcdError in err's chain, or, for a gRPC
// status error that carries one of etcd's messages, the EtcdError that
// rpctypes makes of it; nil otherwise. EtcdError values are comparable, so
// the result can index etcdKinds.
func etcdError(err error) error {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee
	}
	if _, ok := status.FromError(err); ok {
		if errors.As(rpctypes.Error(err), &ee) {
			return ee
		}
	}
	return nil
}

// writeError explains the write errors whose cause a user must fix on the
// server, keeping the client's error in the chain for errors.As.
func writeError(err error, size int) error {
	switch k := classify(err); {
	case k == driver.InvalidArgument && (etcdError(err) == rpctypes.ErrRequestTooLarge || isResourceExhausted(err)):
		return driver.Errorf(driver.InvalidArgument,
			"etcdstore: a %d-byte value is over the etcd server's request size limit "+
				"(etcd --max-request-bytes, 1.5 MiB by default; see the etcdstore documentation): %w", size, err)
	case etcdError(err) == rpctypes.ErrNoSpace:
		return driver.Errorf(driver.Permanent,
			"etcdstore: the etcd database is over its space quota (--quota-backend-bytes) and refuses writes "+
				"until an operator compacts and defragments it and disarms the NOSPACE alarm: %w", err)
	case k == driver.Permanent && isAuthError(err):
		return driver.Errorf(driver.Permanent,
			"etcdstore: the etcd user may not write here: grant its role readwrite on the store prefix: %w", err)
	}
	return err
}

// isAuthError reports whether err is a refusal of the user's credentials
// or permissions.
func isAuthError(err error) bool {
	switch etcdError(err) {
	case rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty,
		rpctypes.ErrUserNotFound, rpctypes.ErrRoleNotGranted, rpctypes.ErrPermissionNotGranted:
		return true
	}
	c, _ := grpcCode(err)
	return c == codes.PermissionDenied || c == codes.Unauthenticated
}

func isResourceExhausted(err error) bool {
	c, _ := grpcCode(err)
	return c == codes.ResourceExhausted
}

// errorf builds a driver error with the package's prefix.
func errorf(kind driver.Kind, format string, args ...any) error {
	return driver.Errorf(kind, "etcdstore: "+format, args...)
}
