package awsutil

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"
)

// Logger returns the logger for aws.Config.Logger that turns the lines the
// AWS SDK would print on stderr (a Date header it cannot parse, a skipped
// checksum) into slog records on l, so that a program's log format holds
// for them too: the SDK's warnings at WARN, its other lines at DEBUG, each
// with source=aws-sdk. A nil l means slog.Default(), looked up at each line.
func Logger(l *slog.Logger) logging.Logger { return sdkLogger{l: l} }

type sdkLogger struct {
	l   *slog.Logger
	ctx context.Context
}

// WithContext makes the SDK pass each request's context to the handler
// (logging.ContextLogger).
func (s sdkLogger) WithContext(ctx context.Context) logging.Logger {
	s.ctx = ctx
	return s
}

func (s sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	l := s.l
	if l == nil {
		l = slog.Default()
	}
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	if !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, fmt.Sprintf(format, v...), "source", "aws-sdk")
}
