package etcdstore_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
)

func TestTLS(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{TLS: true})
	ctx := t.Context()

	t.Run("client certificate", func(t *testing.T) {
		s, err := store.Open(ctx, srv.URL(newPrefix()))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		v := mustPut(t, s, "k", "over TLS", store.IfAbsent())
		if data, gv, err := s.Get(ctx, "k"); err != nil || string(data) != "over TLS" || gv != v {
			t.Fatalf("Get = %q, %q, %v", data, gv, err)
		}
	})

	t.Run("server name", func(t *testing.T) {
		u := strings.Replace(srv.URL(newPrefix()), "?", "?server_name=localhost&", 1)
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mustPut(t, s, "k", "x", store.IfAbsent())
	})

	withParams := func(set map[string]string) string {
		u, err := url.Parse(srv.URL(newPrefix()))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		for k, v := range set {
			if v == "" {
				q.Del(k)
			} else {
				q.Set(k, v)
			}
		}
		q.Set("dial_timeout", "1s")
		u.RawQuery = q.Encode()
		return u.String()
	}
	failures := []struct {
		name    string
		url     string
		mention string
	}{
		{"plain text to a TLS server", "etcd://" + srv.Endpoint + "/p?dial_timeout=1s", "TLS"},
		{"no client certificate", withParams(map[string]string{"cert": "", "key": ""}), "certificate"},
		{"CA that did not sign the server", withParams(map[string]string{"ca": otherCA(t)}), "certificate"},
		{"wrong server name", withParams(map[string]string{"server_name": "etcd.example"}), "etcd.example"},
	}
	for _, c := range failures {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			s, err := store.Open(ctx, c.url)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, store.ErrPermanent) {
				t.Errorf("Open: %v; want ErrPermanent: the configuration is wrong", err)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Open took %v with dial_timeout=1s", d)
			}
			t.Log(err)
		})
	}
}

// otherCA writes the certificate of a CA that signed nothing the server
// has, and returns its file.
func otherCA(t *testing.T) string {
	ca, err := tlsutil.NewCA("some other CA")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
