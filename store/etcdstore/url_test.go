package etcdstore

import (
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

func TestParseURL(t *testing.T) {
	t.Setenv(EnvUsername, "")
	t.Setenv(EnvPassword, "")
	cases := []struct {
		name, url string
		env       map[string]string
		want      urlConfig
	}{
		{"one endpoint", "etcd://127.0.0.1:2379/tenure",
			nil, urlConfig{endpoints: []string{"http://127.0.0.1:2379"}, prefix: "/tenure"}},
		{"default port", "etcd://etcd.internal/tenure/dev/",
			nil, urlConfig{endpoints: []string{"http://etcd.internal:2379"}, prefix: "/tenure/dev/"}},
		{"no prefix", "etcd://h:1234",
			nil, urlConfig{endpoints: []string{"http://h:1234"}}},
		{"root prefix", "etcd://h:1234/",
			nil, urlConfig{endpoints: []string{"http://h:1234"}, prefix: "/"}},
		{"several endpoints", "etcd://h1:2379,h2:2380,h3:2381/p",
			nil, urlConfig{endpoints: []string{"http://h1:2379", "http://h2:2380", "http://h3:2381"}, prefix: "/p"}},
		{"IPv6", "etcd://[::1]:2379/p",
			nil, urlConfig{endpoints: []string{"http://[::1]:2379"}, prefix: "/p"}},
		{"TLS from the CA", "etcd://h1:2379,h2:2379/p?ca=/etc/ca.pem",
			nil, urlConfig{endpoints: []string{"https://h1:2379", "https://h2:2379"}, prefix: "/p", tls: true, ca: "/etc/ca.pem"}},
		{"TLS with system roots", "etcd://h:2379/p?tls=true",
			nil, urlConfig{endpoints: []string{"https://h:2379"}, prefix: "/p", tls: true}},
		{"client certificate", "etcd://h:2379/p?cert=/c.pem&key=/k.pem&server_name=etcd.example",
			nil, urlConfig{endpoints: []string{"https://h:2379"}, prefix: "/p", tls: true, cert: "/c.pem", key: "/k.pem", serverName: "etcd.example"}},
		{"user in URL", "etcd://alice@h:2379/p",
			map[string]string{EnvPassword: "pw"}, urlConfig{endpoints: []string{"http://h:2379"}, prefix: "/p", username: "alice", password: "pw"}},
		{"user from env", "etcd://h:2379/p",
			map[string]string{EnvUsername: "bob", EnvPassword: "pw"}, urlConfig{endpoints: []string{"http://h:2379"}, prefix: "/p", username: "bob", password: "pw"}},
		{"URL user wins", "etcd://alice@h:2379/p",
			map[string]string{EnvUsername: "bob", EnvPassword: "pw"}, urlConfig{endpoints: []string{"http://h:2379"}, prefix: "/p", username: "alice", password: "pw"}},
		{"dial timeout", "etcd://h:2379/p?dial_timeout=250ms",
			nil, urlConfig{endpoints: []string{"http://h:2379"}, prefix: "/p", dialTimeout: 250 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			u, err := url.Parse(c.url)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseURL(u)
			if err != nil {
				t.Fatalf("parseURL(%q): %v", c.url, err)
			}
			want := c.want
			if want.dialTimeout == 0 {
				want.dialTimeout = DefaultDialTimeout
			}
			if !slices.Equal(got.endpoints, want.endpoints) {
				t.Errorf("endpoints %q, want %q", got.endpoints, want.endpoints)
			}
			got.endpoints, want.endpoints = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseURL(%q) =\n %+v\nwant\n %+v", c.url, got, want)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	t.Setenv(EnvUsername, "")
	t.Setenv(EnvPassword, "")
	cases := []struct {
		name, url, want string
	}{
		{"wrong scheme", "etc://h:2379/p", "scheme"},
		{"no endpoint", "etcd:///p", "no endpoint"},
		{"opaque", "etcd:h:2379", "no endpoint"},
		{"password in URL", "etcd://alice:secret@h:2379/p", EnvPassword},
		{"user without password", "etcd://alice@h:2379/p", EnvPassword},
		{"unknown parameter", "etcd://h:2379/p?region=x", `unknown parameter "region"`},
		{"repeated parameter", "etcd://h:2379/p?ca=a&ca=b", "given 2 times"},
		{"cert without key", "etcd://h:2379/p?cert=/c.pem", "cert and key"},
		{"key without cert", "etcd://h:2379/p?key=/k.pem", "cert and key"},
		{"tls=false with a CA", "etcd://h:2379/p?tls=false&ca=/ca.pem", "tls=false"},
		{"bad tls", "etcd://h:2379/p?tls=maybe", "tls="},
		{"bad dial timeout", "etcd://h:2379/p?dial_timeout=5", "dial_timeout"},
		{"negative dial timeout", "etcd://h:2379/p?dial_timeout=-1s", "dial_timeout"},
		{"empty endpoint", "etcd://h1:2379,,h2:2379/p", "empty endpoint"},
		{"port zero", "etcd://h1:0/p", "bad port"},
		{"fragment", "etcd://h:2379/p#x", "fragment"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(c.url)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseURL(u)
			var de *driver.Error
			if !errors.As(err, &de) || de.Kind != driver.Permanent {
				t.Fatalf("parseURL(%q) = %v; want a Permanent driver error", c.url, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for v, want := range map[string]int64{"1": 1, "42": 42, "9223372036854775807": 1<<63 - 1} {
		if got, ok := parseVersion(v); !ok || got != want {
			t.Errorf("parseVersion(%q) = %d, %v; want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "0", "-1", "01", "+1", " 1", "1.0", "0x10", "abc", "9223372036854775808"} {
		if _, ok := parseVersion(v); ok {
			t.Errorf("parseVersion(%q) accepted a version the driver never issues", v)
		}
	}
}
