package testutil

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Azurite's well-known development account. The key is published in
// Azure's documentation and guards nothing but a server bound to 127.0.0.1
// with a throw-away data directory.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	// AzuriteContainer is created when the server starts.
	AzuriteContainer = "tenure-test"
)

// AzuriteServer is a running Azurite blob service (Microsoft's Azure Storage
// emulator) with one empty container.
type AzuriteServer struct {
	// Endpoint is the account's blob service URL, path-style as Azurite
	// serves it: "http://127.0.0.1:port/devstoreaccount1".
	Endpoint  string
	Account   string
	Key       string // the account's shared key, base64
	Container string
}

// URL returns the store URL of prefix in the server's container, for
// store.Open. Credentials are not part of it: see SetEnv.
func (a AzuriteServer) URL(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", a.Endpoint)
	q.Set("account", a.Account)
	u := url.URL{Scheme: "azblob", Host: a.Container, Path: "/" + strings.TrimPrefix(prefix, "/"), RawQuery: q.Encode()}
	return u.String()
}

// ConnectionString returns a connection string for the server's account.
func (a AzuriteServer) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + a.Account + ";AccountKey=" + a.Key + ";BlobEndpoint=" + a.Endpoint + ";"
}

// SetEnv sets AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY to the server's
// account for the rest of the test, and clears
// AZURE_STORAGE_CONNECTION_STRING, so that store.Open of URL works. Like
// t.Setenv, it cannot be used in parallel tests.
func (a AzuriteServer) SetEnv(t testing.TB) {
	t.Helper()
	t.Setenv("AZURE_STORAGE_ACCOUNT", a.Account)
	t.Setenv("AZURE_STORAGE_KEY", a.Key)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
}

// azuriteName is the key of the shared server.
const azuriteName = "azurite"

// Azurite returns a running Azurite blob service; see the package
// documentation for its lifetime. It skips or fails t if Azurite is not
// installed.
//
// Azurite is a Node.js program: scripts/install-servers installs it from
// the npm registry into ${TENURE_CACHE:-$HOME/.cache/tenure}/azurite. It is
// found through TENURE_AZURITE_BIN (the azurite-blob script), that
// directory, then azurite-blob on PATH; node must be on PATH.
//
// Every test shares the container: give each one a prefix of its own.
func Azurite(t testing.TB) AzuriteServer {
	t.Helper()
	if mainActive.Load() {
		sharedMu.Lock()
		ss := shared[azuriteName]
		if ss == nil {
			ss = &sharedServer{}
			shared[azuriteName] = ss
		}
		sharedMu.Unlock()
		ss.once.Do(func() { ss.srv, ss.err = launchAzurite() })
		if ss.err != nil {
			fail(t, ss.err)
			return AzuriteServer{}
		}
		return azuriteInfo(ss.srv)
	}
	srv, err := launchAzurite()
	if err != nil {
		fail(t, err)
		return AzuriteServer{}
	}
	t.Cleanup(srv.stop)
	return azuriteInfo(srv)
}

func azuriteInfo(srv *server) AzuriteServer {
	return AzuriteServer{
		Endpoint:  srv.info.Endpoint + "/" + AzuriteAccount,
		Account:   AzuriteAccount,
		Key:       AzuriteKey,
		Container: AzuriteContainer,
	}
}

// AzuriteDir is where scripts/install-servers installs Azurite with npm.
func AzuriteDir() string {
	if d := os.Getenv("TENURE_CACHE"); d != "" {
		return filepath.Join(d, "azurite")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "tenure", "azurite")
}

// findAzurite looks for the azurite-blob script through TENURE_AZURITE_BIN,
// then AzuriteDir, then PATH, and checks that node, which runs it, is on
// PATH.
func findAzurite() (string, error) {
	const envVar = "TENURE_AZURITE_BIN"
	var bin string
	if p := os.Getenv(envVar); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("testutil: %s=%s: %w", envVar, p, err)
		}
		bin = p
	} else if d := AzuriteDir(); d != "" && isExecutable(filepath.Join(d, "node_modules", ".bin", "azurite-blob")) == nil {
		bin = filepath.Join(d, "node_modules", ".bin", "azurite-blob")
	} else if p, err := exec.LookPath("azurite-blob"); err == nil {
		bin = p
	} else {
		return "", fmt.Errorf("%w: azurite-blob not found in $%s, %s or PATH; run scripts/install-servers (or set %s)",
			errMissing, envVar, filepath.Join(AzuriteDir(), "node_modules", ".bin"), envVar)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("%w: node, which runs Azurite, is not on PATH", errMissing)
	}
	return bin, nil
}

func launchAzurite() (*server, error) {
	bin, err := findAzurite()
	if err != nil {
		return nil, err
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchAzuriteOnce(bin)
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return srv, err
		}
	}
}

func launchAzuriteOnce(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "tenure-azurite-")
	if err != nil {
		return nil, fmt.Errorf("testutil: %s: %w", azuriteName, err)
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: %w", azuriteName, err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: no free port: %w", azuriteName, err)
	}
	args := []string{
		"--blobHost", "127.0.0.1",
		"--blobPort", strconv.Itoa(port),
		"--location", dataDir,
		// The SDK speaks a newer service version than Azurite knows.
		"--skipApiVersionCheck",
		// Ignore headers and parameters Azurite does not implement
		// rather than refuse the request.
		"--loose",
		// The account is always the first path segment, never taken
		// from the host name.
		"--disableProductStyleUrl",
		"--disableTelemetry",
		"--silent",
	}
	// The account list is fixed here, whatever the environment says.
	env := []string{"AZURITE_ACCOUNTS=" + AzuriteAccount + ":" + AzuriteKey}
	proc, err := startProcess(azuriteName, bin, args, env, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{
		info: S3Server{
			Name:     azuriteName,
			Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		},
		proc: proc,
		dir:  dir,
	}
	if err := waitAzurite(srv); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// waitAzurite polls until the server creates the container (or says it
// already has it), the process exits, or StartTimeout passes.
func waitAzurite(srv *server) error {
	info := azuriteInfo(srv)
	cred, err := container.NewSharedKeyCredential(info.Account, info.Key)
	if err != nil {
		return fmt.Errorf("testutil: %s: %w", azuriteName, err)
	}
	client, err := container.NewClientWithSharedKeyCredential(info.Endpoint+"/"+info.Container, cred, &container.ClientOptions{
		ClientOptions: policy.ClientOptions{
			Retry:     policy.RetryOptions{MaxRetries: -1},
			Transport: &http.Client{Timeout: 5 * time.Second},
		},
	})
	if err != nil {
		return fmt.Errorf("testutil: %s: %w", azuriteName, err)
	}
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for {
		if srv.proc.exited() {
			out := srv.proc.tail()
			if strings.Contains(out, "EADDRINUSE") || strings.Contains(out, "address already in use") {
				return fmt.Errorf("testutil: %s on %s: %w", azuriteName, srv.info.Endpoint, errPortTaken)
			}
			return fmt.Errorf("testutil: %s exited during start-up (%v); its output ends:\n%s", azuriteName, srv.proc.err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Create(ctx, nil)
		cancel()
		if err == nil || bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("testutil: %s at %s not ready after %v (last error: %v); its output ends:\n%s",
				azuriteName, srv.info.Endpoint, StartTimeout, lastErr, srv.proc.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
