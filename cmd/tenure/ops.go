package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/tenure-io/tenure/internal/opsserver"
)

// serveOps serves h on addr (the --http flag) until the returned stop is
// called; stop waits a moment for requests in flight.
func serveOps(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return opsserver.Serve(ln, h, log), nil
}
