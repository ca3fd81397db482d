package demo

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
)

// The key-value part's group options: quick failover (a follower checks
// the store after 5 × 200 ms of silence, then waits 100 ms per rank) and
// small batches, so that it finishes in seconds.
var demoKVOptions = rsm.Options{
	FlushInterval:       5 * time.Millisecond,
	HeartbeatInterval:   200 * time.Millisecond,
	MaxMissedHeartbeats: 5,
	LeadershipDelay:     100 * time.Millisecond,
	RequestTimeout:      5 * time.Second,
}

const demoKVGroup = "demo-kv"

type demoKVNode struct {
	id     string
	host   *rsm.Host
	node   *rsm.Node
	m      *kv.Machine
	client *kv.Client
	closed bool
	faults *faultstore.Store // this node's way to the store
	net    *crashNet         // this node's connections to the others
}

// crashNet holds a node's connections so the demo can kill it the way a
// crash does: every connection drops, no new one opens.
type crashNet struct {
	net.Listener
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

func (c *crashNet) track(conn net.Conn) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		conn.Close()
		return nil, errors.New("demo: the node was killed")
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

func (c *crashNet) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return c.track(conn)
}

func (c *crashNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.track(conn)
}

func (c *crashNet) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.Listener.Close()
}

// demoKV is the state of the key-value part: three hosts on loopback
// sharing one store, with mutual TLS between them.
type demoKV struct {
	*demo
	group                string // default demoKVGroup
	st                   *store.Store
	serverTLS, clientTLS *tls.Config
	nodes                []*demoKVNode
}

func (d *demoKV) start(ctx context.Context, id string) (*demoKVNode, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cn := &crashNet{Listener: ln}
	faults := faultstore.New(d.st.Driver())
	host, err := rsm.NewHost(ctx, store.New(faults), rsm.HostConfig{
		ID: id, Addr: ln.Addr().String(), Listener: cn, Dialer: cn.dial,
		ServerTLS: d.serverTLS, ClientTLS: d.clientTLS,
		Logger: d.log, SkipProbe: true, // probed once, before the first start
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	m := kv.New()
	node, err := host.Join(ctx, d.groupName(), map[string]rsm.StateMachine{kv.MachineName: m}, demoKVOptions)
	if err != nil {
		host.Close()
		return nil, err
	}
	n := &demoKVNode{id: id, host: host, node: node, m: m, client: kv.NewClient(node), faults: faults, net: cn}
	d.nodes = append(d.nodes, n)
	return n, nil
}

func (d *demoKV) groupName() string {
	if d.group == "" {
		return demoKVGroup
	}
	return d.group
}

// newDemoKV opens the store at url for a demo part's nodes of group (""
// for the kv part's), with a CA of its own for their TLS. close closes
// the nodes and the store.
func (d *demo) newDemoKV(ctx context.Context, url, group string) (*demoKV, error) {
	dk := &demoKV{demo: d, group: group}
	ca, err := tlsutil.NewCA("tenure " + dk.groupName())
	if err != nil {
		return nil, err
	}
	if dk.serverTLS, err = ca.ServerConfig(true, "127.0.0.1"); err != nil {
		return nil, err
	}
	if dk.clientTLS, err = ca.ClientConfig(true); err != nil {
		return nil, err
	}
	if dk.st, err = store.Open(ctx, url); err != nil {
		return nil, err
	}
	if _, err := store.Probe(ctx, dk.st, 1); err != nil {
		dk.st.Close()
		return nil, err
	}
	return dk, nil
}

// close closes every node, then the store.
func (d *demoKV) close() {
	d.closeAll()
	d.st.Close()
}

func (d *demoKV) closeAll() {
	for _, n := range d.nodes {
		if !n.closed {
			n.closed = true
			_ = n.host.Close()
		}
	}
}

// waitLeader waits until a running node other than not leads, and returns
// it (the one with the highest term if two believe they lead).
func (d *demoKV) waitLeader(ctx context.Context, not *demoKVNode, limit time.Duration) (*demoKVNode, rsm.Status, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var best *demoKVNode
		var bestSt rsm.Status
		for _, n := range d.nodes {
			if n.closed || n == not {
				continue
			}
			if st := n.node.Status(); st.Role == rsm.Leader.String() && st.State == rsm.Joined.String() && (best == nil || st.Term > bestSt.Term) {
				best, bestSt = n, st
			}
		}
		if best != nil {
			return best, bestSt, nil
		}
		select {
		case <-ctx.Done():
			return nil, rsm.Status{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil, rsm.Status{}, fmt.Errorf("demo: no node of group %q leads after %v", d.groupName(), limit)
}

// runKV is the demo's second part: a replicated key-value store whose
// leader is killed mid-write, then a cold restart of the whole group from
// the store alone, checking that every acknowledged write survived.
func (d *demo) runKV(ctx context.Context, url string, writes int) error {
	o := demoKVOptions
	d.start = time.Now()
	fmt.Fprintf(d.out, "\ntenure demo, part %d: three nodes replicate a key-value store (group %q) through a log in %s\n", d.nextPart(), demoKVGroup, url)
	fmt.Fprintf(d.out, "timings: the leader commits a batch of writes per store request, %v after the batch's first write;\n", o.FlushInterval)
	fmt.Fprintf(d.out, "         followers check the store after %d missed heartbeats of %v, then wait %v per rank\n\n",
		o.MaxMissedHeartbeats, o.HeartbeatInterval, o.LeadershipDelay)

	dk, err := d.newDemoKV(ctx, url, "")
	if err != nil {
		return err
	}
	defer dk.close()
	ids := []string{"kv1", "kv2", "kv3"}
	for _, id := range ids {
		if _, err := dk.start(ctx, id); err != nil {
			return err
		}
	}
	leader, st, err := dk.waitLeader(ctx, nil, 10*time.Second)
	if err != nil {
		return err
	}
	d.say("%s leads (term %d)", leader.id, st.Term)

	// Every value carries this run's nonce, so a reused store's old keys
	// cannot pass for this run's writes.
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	run := hex.EncodeToString(nonce[:])
	acked := map[string]string{}
	var mu sync.Mutex
	ack := func(k, v string) {
		mu.Lock()
		acked[k] = v
		mu.Unlock()
	}

	// Writes through a follower, which forwards them to the leader.
	var via *demoKVNode
	for _, n := range dk.nodes {
		if n != leader {
			via = n
			break
		}
	}
	began := time.Now()
	var wg sync.WaitGroup
	var failed sync.Map
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				k, v := fmt.Sprintf("demo/%s/before-%04d", run, i), fmt.Sprintf("value %d of run %s", i, run)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := via.client.Put(wctx, k, []byte(v))
				cancel()
				if err != nil {
					failed.Store(k, err)
					continue
				}
				ack(k, v)
			}
		}()
	}
	for i := 0; i < writes; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	took := time.Since(began)
	d.say("wrote %d keys through follower %s in %v (8 writers: %.0f writes/s); %d acknowledged",
		writes, via.id, took.Round(time.Millisecond), float64(writes)/took.Seconds(), len(acked))
	failed.Range(func(k, v any) bool {
		d.say("  not acknowledged: %s: %v", k, v)
		return true
	})

	// Kill the leader, then write through the follower until a write is
	// acknowledged again; retry each key until it is.
	killed := time.Now()
	leader.closed = true
	leader.faults.SetPartition(faultstore.Partitioned)
	leader.net.kill()
	d.say("killed %s (the leader): like a crashed process, it reaches neither the store nor the other nodes, and says goodbye to no one", leader.id)
	defer leader.host.Close()
	var firstAck time.Time
	attempts, after := 0, 0
	for after < writes/2 {
		if time.Since(killed) > 20*time.Second {
			return fmt.Errorf("demo: no write acknowledged within 20s of the leader's death (%d attempts)", attempts)
		}
		k, v := fmt.Sprintf("demo/%s/after-%04d", run, after), fmt.Sprintf("value %d after the failover, run %s", after, run)
		attempts++
		// Long enough to outlast a failover: the node retries the command
		// with the new leader itself, under the same sequence number.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := via.client.Put(wctx, k, []byte(v))
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			continue
		}
		ack(k, v)
		after++
		if firstAck.IsZero() {
			firstAck = time.Now()
			next, st, err := dk.waitLeader(ctx, leader, 5*time.Second)
			if err != nil {
				return err
			}
			d.say("%s leads (term %d); the first write after the kill was acknowledged %v after it (%d attempts failed and were retried)",
				next.id, st.Term, firstAck.Sub(killed).Round(time.Millisecond), attempts-1)
		}
	}
	failover := firstAck.Sub(killed)
	d.say("wrote %d keys through %s after the failover; %d writes acknowledged in all", after, via.id, len(acked))

	// Cold restart: nothing runs; the group lives in the store alone.
	dk.closeAll()
	d.say("closed every host: no node runs; the log and snapshot are all that is left")
	restart := time.Now()
	dk.nodes = nil
	for _, id := range ids {
		if _, err := dk.start(ctx, id); err != nil {
			return err
		}
	}
	leader, st, err = dk.waitLeader(ctx, nil, 10*time.Second)
	if err != nil {
		return err
	}
	elected := time.Since(restart)

	// Read back through a follower, one linearizable list per page.
	reader := dk.nodes[0]
	if reader == leader {
		reader = dk.nodes[1]
	}
	found := map[string]string{}
	opts := kv.ListOptions{Limit: kv.MaxListLimit}
	var firstRead time.Duration
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		page, err := reader.client.List(rctx, "demo/"+run+"/", opts)
		cancel()
		if err != nil {
			return fmt.Errorf("demo: reading back after the restart: %w", err)
		}
		if firstRead == 0 {
			firstRead = time.Since(restart)
		}
		for _, it := range page.Items {
			found[it.Key] = string(it.Value)
		}
		if !page.More {
			break
		}
		opts.After = page.Items[len(page.Items)-1].Key
	}
	d.say("cold restart: %s leads (term %d) %v after the hosts started; the first read through %s was answered at %v",
		leader.id, st.Term, elected.Round(time.Millisecond), reader.id, firstRead.Round(time.Millisecond))

	var missing []string
	for k, v := range acked {
		if found[k] != v {
			missing = append(missing, k)
		}
	}
	fmt.Fprintf(d.out, "\nrecovered %d/%d acknowledged writes\n", len(acked)-len(missing), len(acked))
	fmt.Fprintf(d.out, "timings: failover %v (leader killed to the next acknowledged write), cold restart %v (hosts started to the first read)\n",
		failover.Round(time.Millisecond), firstRead.Round(time.Millisecond))
	if n := len(missing); n > 0 {
		sort.Strings(missing)
		if n > 5 {
			missing = append(missing[:5], "…")
		}
		return fmt.Errorf("demo: %d acknowledged writes are missing or wrong after the restart: %s", n, strings.Join(missing, ", "))
	}
	if len(acked) == 0 {
		return errors.New("demo: no write was acknowledged")
	}
	return nil
}
