package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
	"github.com/tenure-io/tenure/store/faultstore"
)

const demoEtcdGroup = "demo-etcd"

// etcdPort is a node's client port: etcd's v3 gRPC services over its
// node, on loopback.
type etcdPort struct {
	s    *etcdserver.Server
	g    *grpc.Server
	addr string
	done chan struct{}
}

func (p *etcdPort) stop() {
	_ = p.s.Close()
	p.g.Stop()
	<-p.done
}

func serveEtcd(n *demoKVNode, d *demo) (*etcdPort, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	s, err := etcdserver.New(etcdserver.Config{Node: n.node, Machine: n.m, ClientURLs: []string{"http://" + addr}, Logger: d.log})
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &etcdPort{s: s, g: grpc.NewServer(), addr: addr, done: make(chan struct{})}
	s.Register(p.g)
	go func() {
		defer close(p.done)
		_ = p.g.Serve(ln) // until stop
	}()
	return p, nil
}

// watched is what the demo's watch has received.
type watched struct {
	mu   sync.Mutex
	revs []int64 // the revision of every event, in the order received
	err  error
	done chan struct{}
}

func (w *watched) upTo(rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.revs) > 0 && w.revs[len(w.revs)-1] >= rev
}

// runEtcd is the demo's etcd part: three nodes serve etcd's v3 API, the
// etcd Go client knows all three, and the leader stops under it.
func (d *demo) runEtcd(ctx context.Context, url string) error {
	d.start = time.Now()
	fmt.Fprintf(d.out, "\ntenure demo, part %d: three nodes serve etcd's v3 API (group %q, its log in %s);\n", d.nextPart(), demoEtcdGroup, url)
	fmt.Fprintf(d.out, "         the etcd Go client (go.etcd.io/etcd/client/v3) is given every node's endpoint\n\n")

	dk, err := d.newDemoKV(ctx, url, demoEtcdGroup)
	if err != nil {
		return err
	}
	defer dk.close()
	ports := map[*demoKVNode]*etcdPort{}
	defer func() {
		for _, p := range ports {
			p.stop()
		}
	}()
	var eps []string
	for _, id := range []string{"etcd1", "etcd2", "etcd3"} {
		n, err := dk.start(ctx, id)
		if err != nil {
			return err
		}
		p, err := serveEtcd(n, d)
		if err != nil {
			return err
		}
		ports[n] = p
		eps = append(eps, p.addr)
	}
	leader, st, err := dk.waitLeader(ctx, nil, 10*time.Second)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	d.say("%s leads (term %d); the client connects to %s", leader.id, st.Term, strings.Join(eps, ","))

	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	prefix := "demo/" + hex.EncodeToString(nonce[:]) + "/"
	acked := map[string]string{}
	put := func(k, v string) (*clientv3.PutResponse, error) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := cli.Put(pctx, prefix+k, v)
		if err == nil {
			acked[prefix+k] = v
		}
		return r, err
	}
	first, err := put("greeting", "hello")
	if err != nil {
		return fmt.Errorf("demo: etcd put: %w", err)
	}
	from := first.Header.Revision

	// A watch on the prefix from the first write's revision: it gets the
	// writes before it from the history, then every later one.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := &watched{done: make(chan struct{})}
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	go func() {
		defer close(w.done)
		for r := range wch {
			w.mu.Lock()
			if err := r.Err(); err != nil && w.err == nil && wctx.Err() == nil {
				w.err = err
			}
			for _, ev := range r.Events {
				w.revs = append(w.revs, ev.Kv.ModRevision)
			}
			w.mu.Unlock()
		}
	}()
	defer func() { stopWatch(); <-w.done }()

	for _, kv := range [][2]string{{"colour", "blue"}, {"greeting", "hello again"}} {
		if _, err := put(kv[0], kv[1]); err != nil {
			return fmt.Errorf("demo: etcd put: %w", err)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	got, err := cli.Get(gctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("demo: etcd get: %w", err)
	}
	var shown []string
	for _, kv := range got.Kvs {
		shown = append(shown, fmt.Sprintf("%s=%q", strings.TrimPrefix(string(kv.Key), prefix), kv.Value))
	}
	d.say("put 3 times, watching %s* from revision %d; get --prefix: %s (revision %d)", prefix, from, strings.Join(shown, " "), got.Header.Revision)

	// Stop the leader as a crash would: its client port closes every
	// stream, its node reaches neither the store nor its peers.
	stopped := time.Now()
	leader.closed = true
	leader.faults.SetPartition(faultstore.Partitioned)
	leader.net.kill()
	ports[leader].stop()
	delete(ports, leader)
	defer leader.host.Close()
	d.say("stopped %s (the leader): its client port closed every connection; the client still lists its endpoint", leader.id)

	attempts := 0
	var after *clientv3.PutResponse
	for after == nil {
		if time.Since(stopped) > 20*time.Second {
			return fmt.Errorf("demo: no etcd put acknowledged within 20s of the leader's stop (%d attempts; the last: %w)", attempts, err)
		}
		attempts++
		after, err = put("after-failover", "written with no leader at first")
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	took := time.Since(stopped)
	next, st, err := dk.waitLeader(ctx, leader, 5*time.Second)
	if err != nil {
		return err
	}
	tries := "at the first attempt"
	if attempts > 1 {
		tries = fmt.Sprintf("at attempt %d", attempts)
	}
	d.say("%s leads (term %d); the put after the failover was acknowledged %v after the stop, at revision %d (%s)",
		next.id, st.Term, took.Round(time.Millisecond), after.Header.Revision, tries)

	// Every acknowledged write reads back, and the watch saw every
	// revision from its start to the last write once, in order.
	gctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	got, err = cli.Get(gctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("demo: etcd get after the failover: %w", err)
	}
	found := map[string]string{}
	for _, kv := range got.Kvs {
		found[string(kv.Key)] = string(kv.Value)
	}
	for k, v := range acked {
		if found[k] != v {
			return fmt.Errorf("demo: the acknowledged write %s=%q reads back as %q", k, v, found[k])
		}
	}
	d.say("get --prefix after the failover: %d keys, every acknowledged write, %s=%q among them",
		len(got.Kvs), "after-failover", found[prefix+"after-failover"])

	for deadline := time.Now().Add(10 * time.Second); !w.upTo(after.Header.Revision); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Errorf("demo: the watch saw revisions %v, not yet %d (%v)", w.revs, after.Header.Revision, w.err)
		}
	}
	w.mu.Lock()
	revs, werr := append([]int64(nil), w.revs...), w.err
	w.mu.Unlock()
	if werr != nil {
		return fmt.Errorf("demo: the watch ended: %w", werr)
	}
	for i, r := range revs {
		if r != from+int64(i) {
			return fmt.Errorf("demo: the watch saw revisions %v: a gap or a duplicate at %d", revs, r)
		}
	}
	d.say("the watch saw revisions %d to %d: %d events, each revision once, in order, across the failover", from, revs[len(revs)-1], len(revs))
	fmt.Fprintf(d.out, "\ndone: the client carried on through the leader's stop with no change of its endpoints:\n")
	fmt.Fprintf(d.out, "every acknowledged write survived, and the watch went on with no gap (failover %v)\n", took.Round(time.Millisecond))
	return nil
}
