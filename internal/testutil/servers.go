package testutil

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Fixed test credentials and names. They only ever guard a server bound to
// 127.0.0.1 with a throw-away data directory. Each server's access key is
// AccessKey and a suffix of its own (S3Server.AccessKey).
const (
	AccessKey = "tenuretest"
	SecretKey = "tenuretest-secret"
	Region    = "us-east-1"
	Bucket    = "tenure-test"
)

// StartTimeout bounds how long a server may take to answer its first
// request.
const StartTimeout = 60 * time.Second

// S3Server is a running S3-compatible server with one empty bucket.
type S3Server struct {
	Name      string // "minio" or "versitygw"
	Endpoint  string // "http://127.0.0.1:port"
	Region    string
	Bucket    string
	AccessKey string
	SecretKey string
}

// URL returns the store URL of prefix in the server's bucket, for
// store.Open. Credentials are not part of it: see SetEnv.
func (s S3Server) URL(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", s.Region)
	q.Set("path_style", "true")
	u := url.URL{Scheme: "s3", Host: s.Bucket, Path: "/" + strings.TrimPrefix(prefix, "/"), RawQuery: q.Encode()}
	return u.String()
}

// SetEnv points the AWS default credential chain at the server's
// credentials for the rest of the test, so that store.Open of URL works.
// Like t.Setenv, it cannot be used in parallel tests.
func (s S3Server) SetEnv(t testing.TB) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	// An unreadable shared config or a region set there must not change
	// what the test talks to.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
}

// MinIO returns a running MinIO server; see the package documentation for
// its lifetime. It skips or fails t if MinIO is not installed.
func MinIO(t testing.TB) S3Server {
	t.Helper()
	return get(t, minioSpec)
}

// VersityGW returns a running versitygw server with its posix backend on a
// temporary directory. It skips or fails t if versitygw is not installed.
func VersityGW(t testing.TB) S3Server {
	t.Helper()
	return get(t, versitygwSpec)
}

// Main runs the tests of a package and then stops the servers they shared.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
//
// The test binary exits with m.Run's code once TestMain returns.
func Main(m *testing.M) {
	mainActive.Store(true)
	defer stopShared()
	m.Run()
}

// serverSpec says how to run one kind of server.
type serverSpec struct {
	name   string
	envVar string
	// command returns the arguments and extra environment to serve on addr
	// with its data under dataDir, for the access key accessKey.
	command func(addr, dataDir, accessKey string) (args, env []string)
}

var minioSpec = serverSpec{
	name:   "minio",
	envVar: "TENURE_MINIO_BIN",
	command: func(addr, dataDir, accessKey string) ([]string, []string) {
		return []string{"server", "--quiet", "--address", addr, dataDir},
			[]string{
				"MINIO_ROOT_USER=" + accessKey,
				"MINIO_ROOT_PASSWORD=" + SecretKey,
				"MINIO_SITE_REGION=" + Region,
				// No web console (it would take a second port) and no
				// phoning home for updates.
				"MINIO_BROWSER=off",
				"MINIO_UPDATE=off",
			}
	},
}

var versitygwSpec = serverSpec{
	name:   "versitygw",
	envVar: "TENURE_VERSITYGW_BIN",
	command: func(addr, dataDir, accessKey string) ([]string, []string) {
		return []string{
			"--port", addr,
			"--access", accessKey,
			"--secret", SecretKey,
			"--region", Region,
			"--quiet",
			"posix", dataDir,
		}, nil
	},
}

// Shared servers, used once Main is running the tests.
var (
	mainActive atomic.Bool
	sharedMu   sync.Mutex
	shared     = map[string]*sharedServer{}
)

type sharedServer struct {
	once sync.Once
	srv  *server
	err  error
}

func get(t testing.TB, spec serverSpec) S3Server {
	t.Helper()
	if mainActive.Load() {
		sharedMu.Lock()
		ss := shared[spec.name]
		if ss == nil {
			ss = &sharedServer{}
			shared[spec.name] = ss
		}
		sharedMu.Unlock()
		ss.once.Do(func() { ss.srv, ss.err = launch(spec) })
		if ss.err != nil {
			fail(t, ss.err)
			return S3Server{}
		}
		return ss.srv.info
	}
	srv, err := launch(spec)
	if err != nil {
		fail(t, err)
		return S3Server{}
	}
	t.Cleanup(srv.stop)
	return srv.info
}

func fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errMissing) {
		if os.Getenv("TENURE_REQUIRE_SERVERS") != "1" {
			t.Skip(err)
		}
		t.Fatalf("%v (TENURE_REQUIRE_SERVERS=1: integration tests must run)", err)
	}
	t.Fatal(err)
}

func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for name, ss := range shared {
		if ss.srv != nil {
			ss.srv.stop()
		}
		delete(shared, name)
	}
}

// server is a started server process with its data directory.
type server struct {
	info S3Server
	proc *process
	dir  string
}

func (s *server) stop() {
	s.proc.stop()
	_ = os.RemoveAll(s.dir)
}

// launch starts a server, waits until it answers, and creates the bucket.
func launch(spec serverSpec) (*server, error) {
	bin, err := findBinary(spec.name, spec.envVar)
	if err != nil {
		return nil, err
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchOnce(spec, bin)
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return srv, err
		}
	}
}

var errPortTaken = errors.New("port taken")

func launchOnce(spec serverSpec, bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "tenure-"+spec.name+"-")
	if err != nil {
		return nil, fmt.Errorf("testutil: %s: %w", spec.name, err)
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: %w", spec.name, err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: no free port: %w", spec.name, err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// An access key of its own: a server that another launch started on
	// the same port (both were handed it free) refuses it, rather than
	// pass for this one until this one fails to bind. Two suites would
	// then share one bucket and its keys.
	accessKey := AccessKey + "-" + strings.ToLower(rand.Text()[:8])
	args, env := spec.command(addr, dataDir, accessKey)
	proc, err := startProcess(spec.name, bin, args, env, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{
		info: S3Server{
			Name:      spec.name,
			Endpoint:  "http://" + addr,
			Region:    Region,
			Bucket:    Bucket,
			AccessKey: accessKey,
			SecretKey: SecretKey,
		},
		proc: proc,
		dir:  dir,
	}
	if err := waitReady(srv); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// waitReady polls until the server creates the bucket (or says it already
// has it), the process exits, or StartTimeout passes.
func waitReady(srv *server) error {
	client := s3.New(s3.Options{
		Region:       srv.info.Region,
		BaseEndpoint: aws.String(srv.info.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(srv.info.AccessKey, srv.info.SecretKey, ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   &http.Client{Timeout: 5 * time.Second},
	})
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for {
		if srv.proc.exited() {
			out := srv.proc.tail()
			if strings.Contains(out, "address already in use") || strings.Contains(out, "port is already in use") {
				return fmt.Errorf("testutil: %s on %s: %w", srv.info.Name, srv.info.Endpoint, errPortTaken)
			}
			return fmt.Errorf("testutil: %s exited during start-up (%v); its output ends:\n%s", srv.info.Name, srv.proc.err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(srv.info.Bucket)})
		cancel()
		var apiErr smithy.APIError
		if err == nil || errors.As(err, &apiErr) && apiErr.ErrorCode() == "BucketAlreadyOwnedByYou" {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("testutil: %s at %s not ready after %v (last error: %v); its output ends:\n%s",
				srv.info.Name, srv.info.Endpoint, StartTimeout, lastErr, srv.proc.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
