package etcdserver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
)

// TestMemberListEveryNode: every node of a three-node group lists all
// three, each with its name, peer URL and client URL, as etcd does; so a
// client given one follower's URL learns every endpoint by Sync.
func TestMemberListEveryNode(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 30*time.Second)
	want := map[uint64]string{}
	for i := range g.c.Len() {
		want[etcdserver.MemberID("etcd", g.c.ID(i))] = g.c.ID(i) + " http://" + g.addr(i)
	}
	describe := func(ms []*pb.Member) map[uint64]string {
		got := map[uint64]string{}
		for _, m := range ms {
			if len(m.PeerURLs) != 1 || len(m.ClientURLs) != 1 {
				got[m.ID] = fmt.Sprintf("%s peer %v client %v", m.Name, m.PeerURLs, m.ClientURLs)
				continue
			}
			// The test's nodes authenticate with published peer keys,
			// over TLS.
			if !strings.HasPrefix(m.PeerURLs[0], "https://127.0.0.1:") {
				got[m.ID] = fmt.Sprintf("%s peer %v", m.Name, m.PeerURLs)
				continue
			}
			got[m.ID] = m.Name + " " + m.ClientURLs[0]
		}
		return got
	}
	for i := range g.c.Len() {
		c := g.client(i)
		deadline := time.Now().Add(10 * time.Second)
		for {
			ml, err := c.MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := describe(ml.Members)
			if fmt.Sprint(got) == fmt.Sprint(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d lists %v, want %v", i, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c := g.client(g.follower())
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var eps []string
	for i := range g.c.Len() {
		eps = append(eps, "http://"+g.addr(i))
	}
	got := slices.Clone(c.Endpoints())
	slices.Sort(got)
	slices.Sort(eps)
	if !slices.Equal(got, eps) {
		t.Errorf("a client of one follower syncs to endpoints %v, want %v", got, eps)
	}
}
