package etcdstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/etcdstore"
)

// TestAuth runs a server with authentication enabled and users whose roles
// grant read-write or read-only access to /app/, as doc.go tells operators
// to set up.
func TestAuth(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	admin := srv.Client(t)
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.UserAdd(ctx, "root", "rootpw"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	for role, perm := range map[string]clientv3.PermissionType{
		"tenure-rw": clientv3.PermissionType(clientv3.PermReadWrite),
		"tenure-ro": clientv3.PermissionType(clientv3.PermRead),
	} {
		must(admin.RoleAdd(ctx, role))
		must(admin.RoleGrantPermission(ctx, role, "/app/", clientv3.GetPrefixRangeEnd("/app/"), perm))
	}
	must(admin.UserAdd(ctx, "rw", "rwpw"))
	must(admin.UserGrantRole(ctx, "rw", "tenure-rw"))
	must(admin.UserAdd(ctx, "ro", "ropw"))
	must(admin.UserGrantRole(ctx, "ro", "tenure-ro"))
	must(admin.AuthEnable(ctx))

	url := func(user, prefix string) string {
		u := "etcd://" + srv.Endpoint + prefix + "?dial_timeout=3s"
		if user != "" {
			u = "etcd://" + user + "@" + srv.Endpoint + prefix + "?dial_timeout=3s"
		}
		return u
	}

	t.Run("read-write user", func(t *testing.T) {
		t.Setenv(etcdstore.EnvUsername, "")
		t.Setenv(etcdstore.EnvPassword, "rwpw")
		s, err := store.Open(ctx, url("rw", "/app"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		v := mustPut(t, s, "k", "one", store.IfAbsent())
		ch, err := s.Driver().(driver.Watcher).Watch(ctx, "k", v)
		if err != nil {
			t.Fatal(err)
		}
		v2 := mustPut(t, s, "k", "two", store.IfMatch(v))
		wantEvent(t, next(t, ch), "two", v2, false)
		if items, err := s.List(ctx, "", "", 10); err != nil || len(items) != 1 {
			t.Fatalf("List = %v, %v", items, err)
		}
		if err := s.Delete(ctx, "k", store.IfMatch(v2)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("user from the environment", func(t *testing.T) {
		t.Setenv(etcdstore.EnvUsername, "rw")
		t.Setenv(etcdstore.EnvPassword, "rwpw")
		s, err := store.Open(ctx, url("", "/app/env"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mustPut(t, s, "k", "x", store.IfAbsent())
	})

	t.Run("read-only user", func(t *testing.T) {
		t.Setenv(etcdstore.EnvUsername, "ro")
		t.Setenv(etcdstore.EnvPassword, "ropw")
		s, err := store.Open(ctx, url("", "/app"))
		if err != nil {
			t.Fatalf("Open as a reader: %v", err)
		}
		defer s.Close()
		if _, _, err := s.Get(ctx, "env/k"); err != nil {
			t.Fatalf("Get as a reader: %v", err)
		}
		_, err = s.Put(ctx, "k", []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "readwrite") {
			t.Fatalf("Put as a reader: %v; want ErrPermanent naming the permission", err)
		}
		if err := s.Delete(ctx, "env/k", store.Cond{}); !errors.Is(err, store.ErrPermanent) {
			t.Fatalf("Delete as a reader: %v; want ErrPermanent", err)
		}
	})

	refusals := []struct {
		name, user, password, prefix string
	}{
		{"wrong password", "rw", "nope", "/app"},
		{"unknown user", "mallory", "pw", "/app"},
		{"no credentials", "", "", "/app"},
		{"prefix outside the role", "rw", "rwpw", "/other"},
		{"prefix wider than the role", "rw", "rwpw", "/"},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(etcdstore.EnvUsername, c.user)
			t.Setenv(etcdstore.EnvPassword, c.password)
			start := time.Now()
			s, err := store.Open(ctx, url("", c.prefix))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, store.ErrPermanent) {
				t.Errorf("Open: %v; want ErrPermanent", err)
			}
			if strings.Contains(err.Error(), c.password) && c.password != "" {
				t.Errorf("the error shows the password: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("a refusal took %v", d)
			}
			t.Log(err)
		})
	}
}
