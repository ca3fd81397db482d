package awsutil_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/tenure-io/tenure/internal/awsutil"
)

// captureStderr points os.Stderr at a pipe until the returned function is
// called, which restores it and returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	var (
		buf  bytes.Buffer
		done = make(chan struct{})
	)
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	var once sync.Once
	stop := func() string {
		once.Do(func() {
			os.Stderr = old
			_ = w.Close()
			<-done
			_ = r.Close()
		})
		return buf.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestSDKWarningsGoToSlog has a server answer with a Date header the SDK
// cannot parse, which it warns about: the warning must be a slog record on
// the configured logger, at WARN, and nothing may reach stderr.
func TestSDKWarningsGoToSlog(t *testing.T) {
	noAWSEnvironment(t)
	staticKeys(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", "not a date")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = io.WriteString(w, `{"TableNames":[]}`)
	}))
	defer srv.Close()

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stderr := captureStderr(t)
	d := awsutil.Driver{Name: "testdriver", DefaultRegion: "us-east-1"}
	cfg, err := d.LoadConfig(context.Background(), awsutil.Settings{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	if _, err := client.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	if out := stderr(); out != "" {
		t.Errorf("the SDK wrote to stderr: %q", out)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["level"] == "WARN" && rec["source"] == "aws-sdk" && strings.Contains(rec["msg"].(string), "Date header") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no WARN record from the SDK about the Date header; logs:\n%s", logs.String())
	}
}

func TestLoggerLevels(t *testing.T) {
	var logs bytes.Buffer
	l := awsutil.Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Logf(logging.Debug, "quiet %d", 1)
	l.Logf(logging.Warn, "loud %d", 2)
	if got := logs.String(); strings.Contains(got, "quiet") || !strings.Contains(got, "level=WARN msg=\"loud 2\" source=aws-sdk") {
		t.Fatalf("logs %q: want only the warning, at WARN", got)
	}

	// Without a logger, slog.Default at the time of the line.
	var def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(old)
	awsutil.Logger(nil).Logf(logging.Warn, "to the default")
	if !strings.Contains(def.String(), "to the default") {
		t.Fatalf("default logger got %q", def.String())
	}
}
