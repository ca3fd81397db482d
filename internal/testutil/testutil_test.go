package testutil

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestMain(m *testing.M) { Main(m) }

func TestFindBinaryOrder(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TENURE_CACHE", cache)
	pathDir := t.TempDir()
	t.Setenv("PATH", pathDir)
	const name, env = "fakeserver", "TENURE_FAKESERVER_BIN"
	t.Setenv(env, "")

	if _, err := findBinary(name, env); !errors.Is(err, errMissing) {
		t.Fatalf("nothing installed: got %v, want errMissing", err)
	} else if !strings.Contains(err.Error(), "scripts/install-servers") {
		t.Errorf("error %q does not say how to install", err)
	}

	onPath := writeExecutable(t, pathDir, name)
	if got, err := findBinary(name, env); err != nil || got != onPath {
		t.Errorf("PATH only: got %q, %v; want %q", got, err, onPath)
	}

	inCache := writeExecutable(t, filepath.Join(cache, "bin"), name)
	if got, err := findBinary(name, env); err != nil || got != inCache {
		t.Errorf("cache and PATH: got %q, %v; want the cache's %q", got, err, inCache)
	}

	explicit := writeExecutable(t, t.TempDir(), name)
	t.Setenv(env, explicit)
	if got, err := findBinary(name, env); err != nil || got != explicit {
		t.Errorf("env var set: got %q, %v; want %q", got, err, explicit)
	}

	t.Setenv(env, filepath.Join(t.TempDir(), "missing"))
	if _, err := findBinary(name, env); err == nil || errors.Is(err, errMissing) {
		t.Errorf("env var naming a missing file: got %v, want an error that is not a skip", err)
	}
}

func writeExecutable(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := newTailBuffer(8)
	_, _ = b.Write([]byte("0123456789"))
	_, _ = b.Write([]byte("ab"))
	if got := b.String(); got != "456789ab" {
		t.Errorf("got %q, want %q", got, "456789ab")
	}
}

func TestServers(t *testing.T) {
	for _, start := range []func(testing.TB) S3Server{MinIO, VersityGW} {
		srv := start(t)
		t.Run(srv.Name, func(t *testing.T) {
			if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
				t.Errorf("endpoint %q is not on loopback", srv.Endpoint)
			}
			// The same server is handed to every caller while Main runs.
			if again := start(t); again != srv {
				t.Errorf("second call returned %+v, want the shared %+v", again, srv)
			}
			client := s3.New(s3.Options{
				Region:       srv.Region,
				BaseEndpoint: aws.String(srv.Endpoint),
				UsePathStyle: true,
				Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
			})
			ctx := context.Background()
			if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(srv.Bucket)}); err != nil {
				t.Fatalf("bucket %s: %v", srv.Bucket, err)
			}
			key := aws.String("testutil/" + t.Name())
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: key, Body: strings.NewReader("x")}); err != nil {
				t.Fatalf("put: %v", err)
			}
			if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: key}); err != nil {
				t.Fatalf("delete: %v", err)
			}
		})
	}
}

func TestURL(t *testing.T) {
	srv := S3Server{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", Bucket: "b"}
	want := "s3://b/p/q?endpoint=http%3A%2F%2F127.0.0.1%3A9000&path_style=true&region=us-east-1"
	if got := srv.URL("p/q"); got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestPerCallServerStopsWithItsTest(t *testing.T) {
	mainActive.Store(false)
	defer mainActive.Store(true)
	var srv S3Server
	t.Run("inner", func(t *testing.T) {
		srv = MinIO(t)
		if _, err := net.Dial("tcp", strings.TrimPrefix(srv.Endpoint, "http://")); err != nil {
			t.Fatalf("server not listening: %v", err)
		}
	})
	if srv.Endpoint == "" {
		t.Skip("inner test skipped: MinIO not installed")
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(srv.Endpoint, "http://")); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after its test ended", srv.Endpoint)
	}
}

// TestLaunchOnATakenPort: a server started on a port that another
// launch's server already serves (both were handed it free) must not
// pass for ready by that one's answers: it fails to bind, and the launch
// reports the port taken, to try another.
func TestLaunchOnATakenPort(t *testing.T) {
	first := MinIO(t)
	port, err := strconv.Atoi(first.Endpoint[strings.LastIndexByte(first.Endpoint, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	defer func(prev func() (int, error)) { freePort = prev }(freePort)
	freePort = func() (int, error) { return port, nil }
	bin, err := findBinary(minioSpec.name, minioSpec.envVar)
	if err != nil {
		t.Skip(err)
	}
	srv, err := launchOnce(minioSpec, bin)
	if err == nil {
		srv.stop()
		t.Fatalf("a second server on %s was taken for ready (it answered for the first)", first.Endpoint)
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("launch on a taken port: %v; want errPortTaken", err)
	}
}

func TestFindEtcd3(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TENURE_CACHE", cache)
	t.Setenv("TENURE_ETCD3_MODULES", "")
	pathDir := t.TempDir()
	t.Setenv("PATH", pathDir)
	writePackage := func(modules, version string) {
		t.Helper()
		dir := filepath.Join(modules, "etcd3")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"etcd3","version":"`+version+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cached := filepath.Join(cache, "etcd3", "node_modules")
	writePackage(cached, Etcd3Version)

	if _, _, err := findEtcd3(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "node") {
		t.Errorf("no node on PATH: got %v, want errMissing naming node", err)
	}
	node := writeExecutable(t, pathDir, "node")
	if gotNode, got, err := findEtcd3(); err != nil || gotNode != node || got != cached {
		t.Errorf("in the cache: got %q, %q, %v; want %q, %q", gotNode, got, err, node, cached)
	}

	writePackage(cached, "1.0.0")
	if _, _, err := findEtcd3(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "scripts/install-servers") {
		t.Errorf("another version in the cache: got %v, want errMissing saying how to install", err)
	}
	if err := os.RemoveAll(cached); err != nil {
		t.Fatal(err)
	}
	if _, _, err := findEtcd3(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "scripts/install-servers") {
		t.Errorf("nothing installed: got %v, want errMissing saying how to install", err)
	}

	explicit := t.TempDir()
	t.Setenv("TENURE_ETCD3_MODULES", explicit)
	if _, _, err := findEtcd3(); err == nil || errors.Is(err, errMissing) {
		t.Errorf("TENURE_ETCD3_MODULES without the package: got %v, want an error that is not a skip", err)
	}
	writePackage(explicit, "1.0.0")
	if _, _, err := findEtcd3(); err == nil || errors.Is(err, errMissing) {
		t.Errorf("TENURE_ETCD3_MODULES with another version: got %v, want an error that is not a skip", err)
	}
	writePackage(explicit, Etcd3Version)
	if _, got, err := findEtcd3(); err != nil || got != explicit {
		t.Errorf("TENURE_ETCD3_MODULES: got %q, %v; want %q", got, err, explicit)
	}
}
