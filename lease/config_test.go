package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestConfigValidate(t *testing.T) {
	mem := store.New(memstore.New())
	cases := []struct {
		name  string
		cfg   lease.Config
		field string // must be named in the error; "" means valid
	}{
		{"defaults", lease.Config{Store: mem, OwnerID: "a"}, ""},
		{"a prefix of several segments", lease.Config{Store: mem, OwnerID: "a", Prefix: "jobs/nightly/"}, ""},
		{"no store", lease.Config{OwnerID: "a"}, "Store"},
		// Keys are Prefix+"assignment.json" and the like: a prefix
		// without a final "/" would glue onto them.
		{"prefix without a final /", lease.Config{Store: mem, OwnerID: "a", Prefix: "jobs"}, `Prefix "jobs": must end with "/"`},
		{"prefix with ..", lease.Config{Store: mem, OwnerID: "a", Prefix: "../x/"}, `Prefix "../x/"`},
		{"prefix with an empty segment", lease.Config{Store: mem, OwnerID: "a", Prefix: "a//b/"}, `Prefix "a//b/"`},
		{"prefix with a leading /", lease.Config{Store: mem, OwnerID: "a", Prefix: "/x/"}, `Prefix "/x/"`},
		{"shard IDs with /", lease.Config{Store: mem, OwnerID: "a", ShardIDs: []string{"eu/1", "eu/2"}}, ""},
		{"shard ID ..", lease.Config{Store: mem, OwnerID: "a", ShardIDs: []string{"a", ".."}}, `shard ID ".."`},
		{"shard ID with an empty segment", lease.Config{Store: mem, OwnerID: "a", ShardIDs: []string{"eu//1"}}, `shard ID "eu//1"`},
		{"owner with a control character", lease.Config{Store: mem, OwnerID: "a\n"}, "OwnerID"},
		{"renew period above lease", lease.Config{Store: mem, OwnerID: "a", LeaseDuration: time.Second, RenewPeriod: 2 * time.Second}, "RenewPeriod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, lease.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v; want an ErrInvalidConfig naming %s", err, c.field)
			}
		})
	}
}
