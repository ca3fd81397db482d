// Package grpcslog routes gRPC's own logs (package grpclog) through a
// *slog.Logger, with the attribute component=grpc, so that a command that
// logs JSON prints gRPC's lines as JSON too.
//
// Importing it installs it, as grpclog asks, before any gRPC call; it is
// process-wide. gRPC's info and warnings are debug here (gRPC hides both
// by default): its warnings are mostly "createTransport failed" for each
// reconnection to a node that stopped, which the node's own lines already
// report once, with the leader's loss. Until SetLogger names a logger,
// only errors print, to slog.Default(), as with gRPC's default logger.
package grpcslog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/grpclog"
)

var logger atomic.Pointer[slog.Logger]

func init() { grpclog.SetLoggerV2(Logger{}) }

// SetLogger sends gRPC's logs to l from now on (nil: errors only, to
// slog.Default()), and returns the logger it replaces.
func SetLogger(l *slog.Logger) (prev *slog.Logger) { return logger.Swap(l) }

// Current is the logger SetLogger named last; nil if none.
func Current() *slog.Logger { return logger.Load() }

// Logger is a grpclog.LoggerV2 on the logger SetLogger names.
type Logger struct{}

var _ grpclog.LoggerV2 = Logger{}

func (Logger) log(level slog.Level, msg string) {
	l := logger.Load()
	if l == nil {
		if level < slog.LevelError {
			return
		}
		l = slog.Default()
	}
	l.Log(context.Background(), level, strings.TrimSuffix(msg, "\n"), "component", "grpc")
}

func (g Logger) Info(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g Logger) Infoln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g Logger) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g Logger) Warning(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g Logger) Warningln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g Logger) Warningf(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g Logger) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g Logger) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)) }
func (g Logger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g Logger) Fatal(args ...any)                 { g.Error(args...); os.Exit(1) }
func (g Logger) Fatalln(args ...any)               { g.Errorln(args...); os.Exit(1) }
func (g Logger) Fatalf(format string, args ...any) { g.Errorf(format, args...); os.Exit(1) }

// V reports whether verbosity level l is on: only 0.
func (Logger) V(l int) bool { return l <= 0 }
