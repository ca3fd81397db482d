package testutil

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindAzuriteOrder(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TENURE_CACHE", cache)
	pathDir := t.TempDir()
	t.Setenv("PATH", pathDir)
	const env = "TENURE_AZURITE_BIN"
	t.Setenv(env, "")

	if _, err := findAzurite(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "scripts/install-servers") {
		t.Fatalf("nothing installed: got %v, want errMissing saying how to install", err)
	}
	onPath := writeExecutable(t, pathDir, "azurite-blob")
	if _, err := findAzurite(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "node") {
		t.Errorf("azurite-blob without node: got %v, want errMissing naming node", err)
	}
	writeExecutable(t, pathDir, "node")
	if got, err := findAzurite(); err != nil || got != onPath {
		t.Errorf("PATH only: got %q, %v; want %q", got, err, onPath)
	}
	inCache := writeExecutable(t, filepath.Join(cache, "azurite", "node_modules", ".bin"), "azurite-blob")
	if got, err := findAzurite(); err != nil || got != inCache {
		t.Errorf("cache and PATH: got %q, %v; want the cache's %q", got, err, inCache)
	}
	explicit := writeExecutable(t, t.TempDir(), "azurite-blob")
	t.Setenv(env, explicit)
	if got, err := findAzurite(); err != nil || got != explicit {
		t.Errorf("env var set: got %q, %v; want %q", got, err, explicit)
	}
	t.Setenv(env, filepath.Join(t.TempDir(), "missing"))
	if _, err := findAzurite(); err == nil || errors.Is(err, errMissing) {
		t.Errorf("env var naming a missing file: got %v, want an error that is not a skip", err)
	}
}

func TestAzuriteURL(t *testing.T) {
	a := AzuriteServer{Endpoint: "http://127.0.0.1:10000/devstoreaccount1", Account: AzuriteAccount, Key: AzuriteKey, Container: AzuriteContainer}
	u, err := url.Parse(a.URL("/tenure/x"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "azblob" || u.Host != AzuriteContainer || u.Path != "/tenure/x" ||
		u.Query().Get("endpoint") != a.Endpoint || u.Query().Get("account") != AzuriteAccount {
		t.Errorf("URL = %s", u)
	}
	if cs := a.ConnectionString(); !strings.Contains(cs, "BlobEndpoint="+a.Endpoint+";") || !strings.Contains(cs, "AccountName="+AzuriteAccount+";") {
		t.Errorf("ConnectionString = %s", cs)
	}
}
