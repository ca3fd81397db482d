package grpcslog_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/grpclog"

	"github.com/tenure-io/tenure/internal/grpcslog"
)

// gRPC's warnings and info are below the default level; its errors are
// lines of the logger set, marked as gRPC's.
func TestLevels(t *testing.T) {
	var buf strings.Builder
	prev := grpcslog.SetLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer grpcslog.SetLogger(prev)
	grpclog.Warningf("[core] addrConn.createTransport failed to connect to %s", "127.0.0.1:1")
	grpclog.Infof("[core] Channel Connectivity change to %s", "IDLE")
	if buf.Len() != 0 {
		t.Errorf("gRPC's warnings and info print at the default level:\n%s", buf.String())
	}
	grpclog.Errorf("transport: %s", "boom")
	var line map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &line); err != nil || line["msg"] != "transport: boom" || line["component"] != "grpc" || line["level"] != "ERROR" {
		t.Errorf("gRPC's error is not a JSON line of the logger: %v\n%s", err, buf.String())
	}
}
