package azurestore_test

import (
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/azurestore"
)

// clearEnv unsets every variable OpenURL reads, so that the machine's own
// Azure settings cannot change what a test opens.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{azurestore.EnvAccount, azurestore.EnvKey, azurestore.EnvConnectionString} {
		t.Setenv(v, "")
	}
}

func TestSchemeRegistered(t *testing.T) {
	for _, s := range store.Schemes() {
		if s == azurestore.Scheme {
			return
		}
	}
	t.Errorf("scheme %q not registered: %v", azurestore.Scheme, store.Schemes())
}

// TestOpenBadURL: malformed URLs fail before any request, with a permanent
// error that names the problem.
func TestOpenBadURL(t *testing.T) {
	clearEnv(t)
	// Were a request made, it would go here and fail differently.
	t.Setenv(azurestore.EnvKey, testutil.AzuriteKey)
	t.Setenv(azurestore.EnvAccount, testutil.AzuriteAccount)
	cases := []struct{ url, says string }{
		{"azblob://", "no container"},
		{"azblob:container", "no container"},
		{"azblob://Upper/p", "not a valid container name"},
		{"azblob://ab/p", "not a valid container name"},
		{"azblob://a--b/p", "not a valid container name"},
		{"azblob://-ab/p", "not a valid container name"},
		{"azblob://" + strings.Repeat("a", 64) + "/p", "not a valid container name"},
		{"azblob://box:10000/p", "set the service with ?endpoint="},
		{"azblob://user:pass@box/p", "credentials do not belong in the URL"},
		{"azblob://box//p", `starts with "/"`},
		{"azblob://box/p?region=x", `unknown parameter "region"`},
		{"azblob://box/p?account=a1c&account=b2c", "given 2 times"},
		{"azblob://box/p?account=Bad_Name", "want 3 to 24 lower-case letters and digits"},
		{"azblob://box/p?endpoint=127.0.0.1:10000", "want the blob service's http:// or https:// URL"},
		{"azblob://box/p?endpoint=ftp://host", "want the blob service's http:// or https:// URL"},
		{"azblob://box/p?endpoint=" + url.QueryEscape("https://h/?sv=sas"), "want the blob service's http:// or https:// URL"},
		{"azblob://box/dot./p?endpoint=http://127.0.0.1:1/devstoreaccount1", `ends in "."`},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			_, err := store.Open(ctx(t), c.url)
			if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Open: %v; want ErrPermanent saying %q", err, c.says)
			}
			if strings.Contains(err.Error(), "pass@") {
				t.Errorf("the error shows the URL's password: %v", err)
			}
		})
	}
}

// TestOpenCredentialErrors: credentials that are missing or malformed fail
// before any request.
func TestOpenCredentialErrors(t *testing.T) {
	const endpoint = "http://127.0.0.1:1/devstoreaccount1"
	cases := []struct {
		name, url string
		env       map[string]string
		says      string
	}{
		{"key without account", "azblob://box/p?endpoint=" + endpoint,
			map[string]string{azurestore.EnvKey: testutil.AzuriteKey}, "no account is named"},
		{"key not base64", "azblob://box/p?endpoint=" + endpoint + "&account=devstoreaccount1",
			map[string]string{azurestore.EnvKey: "not base64!"}, "not a valid account key"},
		{"connection string and endpoint", "azblob://box/p?endpoint=" + endpoint,
			map[string]string{azurestore.EnvConnectionString: "AccountName=a;AccountKey=" + testutil.AzuriteKey}, "cannot be used with AZURE_STORAGE_CONNECTION_STRING"},
		{"bad connection string", "azblob://box/p",
			map[string]string{azurestore.EnvConnectionString: "nonsense"}, "not a valid connection string"},
		{"no account at all", "azblob://box/p", nil, "no account"},
		{"token over plain HTTP", "azblob://box/p?endpoint=" + endpoint, nil, "plain HTTP"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := store.Open(ctx(t), c.url)
			if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Open: %v; want ErrPermanent saying %q", err, c.says)
			}
			if strings.Contains(fmtErr(err), testutil.AzuriteKey) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestOpenAzurite(t *testing.T) {
	srv := testutil.Azurite(t)
	t.Run("shared key", func(t *testing.T) {
		clearEnv(t)
		srv.SetEnv(t)
		roundTrip(t, srv.URL(newPrefix()))
	})
	t.Run("account from the URL", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(azurestore.EnvKey, srv.Key)
		roundTrip(t, srv.URL(newPrefix()))
	})
	t.Run("connection string", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(azurestore.EnvConnectionString, srv.ConnectionString())
		roundTrip(t, "azblob://"+srv.Container+"/"+newPrefix())
	})
	t.Run("missing container", func(t *testing.T) {
		clearEnv(t)
		srv.SetEnv(t)
		u := strings.Replace(srv.URL("p"), "azblob://"+srv.Container, "azblob://no-such-container", 1)
		_, err := store.Open(ctx(t), u)
		if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "no-such-container") {
			t.Errorf("Open of a missing container: %v; want ErrPermanent naming it", err)
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		clearEnv(t)
		srv.SetEnv(t)
		t.Setenv(azurestore.EnvKey, base64.StdEncoding.EncodeToString([]byte("a key of 64 bytes that the account does not have, is refused.")))
		_, err := store.Open(ctx(t), srv.URL("p"))
		if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "denied") {
			t.Errorf("Open with a wrong key: %v; want ErrPermanent saying access is denied", err)
		}
	})
	t.Run("wrong account", func(t *testing.T) {
		clearEnv(t)
		srv.SetEnv(t)
		u := strings.Replace(srv.URL("p"), "account="+srv.Account, "account=someoneelse", 1)
		_, err := store.Open(ctx(t), u)
		if !errors.Is(err, store.ErrPermanent) {
			t.Errorf("Open signing as another account: %v; want ErrPermanent", err)
		}
	})
}

// roundTrip opens rawURL and writes, reads and deletes one key through it.
func roundTrip(t *testing.T, rawURL string) {
	t.Helper()
	s, err := store.Open(ctx(t), rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	defer s.Close()
	v, err := s.Put(ctx(t), "lock", []byte("x"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if data, gv, err := s.Get(ctx(t), "lock"); err != nil || string(data) != "x" || gv != v {
		t.Fatalf("Get = %q, %q, %v; want x, %q", data, gv, err, v)
	}
	if err := s.Delete(ctx(t), "lock", store.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	res, err := store.Probe(ctx(t), s, 2)
	if err != nil || !res.OK() || !res.DeleteIfMatch {
		t.Errorf("Probe = %+v, %v; want every condition enforced", res, err)
	}
}
