//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
)

// etcd3TTL is the TTL, in seconds, of the leases and the election in the
// etcd3 client's scenario.
const etcd3TTL = 3

// etcd3Event is a watch event as testdata/etcd3/acceptance.js reports it.
type etcd3Event struct {
	Type  string `json:"type"`
	Key   string `json:"key"`
	Value string `json:"value"`
	Rev   int64  `json:"rev"`
}

// etcd3Report is what testdata/etcd3/acceptance.js prints, one field a
// step.
type etcd3Report struct {
	KV struct {
		PutRevisions    []int64           `json:"putRevisions"`
		Get             *string           `json:"get"`
		Prefix          map[string]string `json:"prefix"`
		Count           int               `json:"count"`
		LimitedKeys     []string          `json:"limitedKeys"`
		LimitedMore     bool              `json:"limitedMore"`
		LimitedCount    int               `json:"limitedCount"`
		UpdateRevision  int64             `json:"updateRevision"`
		AtFirstRevision *string           `json:"atFirstRevision"`
		Latest          struct {
			Value          string `json:"value"`
			CreateRevision int64  `json:"createRevision"`
			ModRevision    int64  `json:"modRevision"`
			Version        int64  `json:"version"`
		} `json:"latest"`
		DeletedPrev  [][2]string `json:"deletedPrev"`
		DeletedCount int         `json:"deletedCount"`
		AfterDelete  *string     `json:"afterDelete"`
		Remaining    int         `json:"remaining"`
	}
	Txn struct {
		First      bool     `json:"first"`
		Second     bool     `json:"second"`
		SecondElse []string `json:"secondElse"`
		Value      *string  `json:"value"`
	}
	Large struct {
		Count  int      `json:"count"`
		Keys   []string `json:"keys"`
		Sizes  []int    `json:"sizes"`
		Intact []bool   `json:"intact"`
	}
	Leases struct {
		Kept            string  `json:"kept"`
		Expiring        string  `json:"expiring"`
		ExpiringPresent *string `json:"expiringPresent"`
	}
	Election struct {
		Leader      *string `json:"leader"`
		Observed    *string `json:"observed"`
		BetaElected bool    `json:"betaElected"`
	}
	Kept struct {
		Victim              string   `json:"victim"`
		Value               *string  `json:"value"`
		TTL                 int64    `json:"ttl"`
		GrantedTTL          int64    `json:"grantedTTL"`
		Keys                []string `json:"keys"`
		Keepalives          int      `json:"keepalives"`
		KeepalivesAfterKill int      `json:"keepalivesAfterKill"`
		KeepaliveFailures   []struct {
			Error string `json:"error"`
			Ms    int64  `json:"ms"`
		} `json:"keepaliveFailures"`
		Lost []string `json:"lost"`
	}
	Puts struct {
		Acked []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
			Rev   int64  `json:"rev"`
		} `json:"acked"`
		AckedBeforeKill int `json:"ackedBeforeKill"`
		Failures        []struct {
			Key       string `json:"key"`
			Error     string `json:"error"`
			AfterKill bool   `json:"afterKill"`
		} `json:"failures"`
		Stored map[string]struct {
			Value string `json:"value"`
			Rev   int64  `json:"rev"`
		} `json:"stored"`
	}
	ElectionAfter struct {
		LeaderAfterKill      *string   `json:"leaderAfterKill"`
		BetaElectedAfterKill bool      `json:"betaElectedAfterKill"`
		LeaderAfterResign    *string   `json:"leaderAfterResign"`
		Observed             *string   `json:"observed"`
		Changes              []*string `json:"changes"`
		Errors               []string  `json:"errors"`
	}
	Watch struct {
		LeaderBefore  string       `json:"leaderBefore"`
		LeaderAfter   string       `json:"leaderAfter"`
		Members       []string     `json:"members"`
		StartRevision int64        `json:"startRevision"`
		EndRevision   int64        `json:"endRevision"`
		Events        []etcd3Event `json:"events"`
		History       []etcd3Event `json:"history"`
		LeaseEvents   []etcd3Event `json:"leaseEvents"`
		Disconnects   []string     `json:"disconnects"`
		Errors        []string     `json:"errors"`
	}
	Revoked struct {
		AfterRevoke    *string `json:"afterRevoke"`
		ExpiredAfterMs int64   `json:"expiredAfterMs"`
		TTL            int64   `json:"ttl"`
	}
}

// TestEtcd3Node runs the npm etcd3 client (Node.js, grpc-js, its own copy
// of etcd's protos) against three tenure etcd serve processes on MinIO:
// testdata/etcd3/acceptance.js puts, gets, deletes, runs a Txn, watches,
// keeps a lease alive, lets one expire and runs the package's election,
// and the group's leader is killed (SIGKILL) while it writes. The script
// reports what the client saw; this test checks it.
func TestEtcd3Node(t *testing.T) {
	node, modules := testutil.Etcd3(t)
	minio := testutil.MinIO(t)
	bin := buildTenure(t)
	env := awsEnv(t, minio)
	storeURL := minio.URL("etcd3-" + randomSuffix())

	var eps []string
	var procs []*kvProcess
	for i := range 3 {
		client := testutil.FreeAddr(t)
		// The demo's timings: a follower takes over about a second after
		// the leader dies.
		p := startProcess(t, bin, env, client, "etcd", "serve", "--store", storeURL,
			"--id", fmt.Sprintf("n%d", i), "--peer-listen", "127.0.0.1:0", "--peer-plaintext",
			"--listen-client-urls", "http://"+client, "--flush-interval", "5ms",
			"--heartbeat", "200ms", "--max-missed-heartbeats", "5", "--log-level", "warn")
		waitProbe(t, p, "http://"+client+"/readyz", http.StatusOK, "")
		eps, procs = append(eps, "http://"+client), append(procs, p)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/etcd3/acceptance.js")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules,
		"TENURE_ETCD_ENDPOINTS="+strings.Join(eps, ","), fmt.Sprintf("TENURE_ETCD_TTL=%d", etcd3TTL))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// The script's steps, each checked below once the script has ended;
	// at "kill-leader" the leader is killed and the script told.
	var (
		raw    []string
		steps  = map[string]json.RawMessage{}
		killed = -1
	)
	dump := func() {
		t.Helper()
		var nodes strings.Builder
		for i, p := range procs {
			fmt.Fprintf(&nodes, "--- n%d:\n%s", i, p.output())
		}
		t.Logf("script output:\n%s\nscript stderr:\n%s\nnodes:\n%s", strings.Join(raw, "\n"), stderr.String(), nodes.String())
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		raw = append(raw, line)
		var head struct {
			Step string `json:"step"`
		}
		if err := json.Unmarshal([]byte(line), &head); err != nil || head.Step == "" {
			t.Errorf("a line that is not a step: %q", line)
			continue
		}
		if _, dup := steps[head.Step]; dup {
			t.Errorf("step %q reported twice", head.Step)
		}
		steps[head.Step] = json.RawMessage(line)
		if head.Step == "kill-leader" {
			killed = etcdLeader(t, eps)
			if code := procs[killed].stop(t, syscall.SIGKILL); code != -1 {
				t.Errorf("the leader n%d exited with %d after SIGKILL, want -1 (killed)", killed, code)
			}
			if _, err := fmt.Fprintf(stdin, "n%d\n", killed); err != nil {
				t.Errorf("telling the script of the kill: %v", err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("node: %v", err)
	}
	if b, ok := steps["error"]; ok {
		t.Errorf("the script failed: %s", b)
	} else if _, ok := steps["done"]; !ok {
		t.Errorf("the script ended without reporting done")
	}

	// Every step the script reported is checked, also after a failure.
	var r etcd3Report
	have := func(names ...string) bool {
		for _, n := range names {
			if _, ok := steps[n]; !ok {
				return false
			}
		}
		return true
	}
	for step, dst := range map[string]any{
		"kv": &r.KV, "txn": &r.Txn, "large": &r.Large, "leases": &r.Leases, "election": &r.Election, "kept": &r.Kept,
		"puts": &r.Puts, "election-after": &r.ElectionAfter, "watch": &r.Watch, "revoked": &r.Revoked,
	} {
		if b, ok := steps[step]; !ok {
			t.Errorf("no %q step", step)
		} else if err := json.Unmarshal(b, dst); err != nil {
			t.Errorf("step %q: %v", step, err)
		}
	}
	if have("puts") {
		t.Logf("n%d (the leader) killed; %d puts acknowledged, %d before the kill; %d failed attempts: %s",
			killed, len(r.Puts.Acked), r.Puts.AckedBeforeKill, len(r.Puts.Failures), putFailures(r.Puts.Failures))
		checkEtcd3Puts(t, r)
	}
	if have("kept") {
		var fs strings.Builder
		for _, f := range r.Kept.KeepaliveFailures {
			fmt.Fprintf(&fs, "\n  %+d ms: %s", f.Ms, f.Error)
		}
		t.Logf("kept lease: %d keep-alives answered, %d after the kill; the keep-alive failures the client saw, in ms from the kill:%s",
			r.Kept.Keepalives, r.Kept.KeepalivesAfterKill, fs.String())
	}
	if have("kv", "txn") {
		checkEtcd3KV(t, r)
	}
	// A get of 2 MB, more than a request may be: the answer is whole.
	if l := r.Large; have("large") && (l.Count != 5 || !slices.Equal(l.Keys, []string{"big/0", "big/1", "big/2", "big/3", "big/4"}) ||
		!slices.Equal(l.Sizes, []int{400 << 10, 400 << 10, 400 << 10, 400 << 10, 400 << 10}) || slices.Contains(l.Intact, false)) {
		t.Errorf("get big/ (5 values of 400 KiB): count %d, keys %v, sizes %v, intact %v", l.Count, l.Keys, l.Sizes, l.Intact)
	}
	if have("leases", "kept") {
		checkEtcd3Leases(t, r, killed, have("revoked"))
	}
	if have("election", "election-after") {
		checkEtcd3Election(t, r)
	}
	if have("watch", "puts") {
		t.Logf("the watch stream's nodes (member IDs): %q, the leader's %s, then %s; its disconnections: %q",
			r.Watch.Members, r.Watch.LeaderBefore, r.Watch.LeaderAfter, r.Watch.Disconnects)
		checkEtcd3Watch(t, r)
	}
	if t.Failed() {
		dump()
	}
}

// etcdLeader returns the index of the node whose /status says it leads,
// waiting for exactly one to say so.
func etcdLeader(t *testing.T, eps []string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var seen []string
	for time.Now().Before(deadline) {
		leaders := []int{}
		seen = seen[:0]
		for i, ep := range eps {
			_, body := httpGetQuiet(ep+"/status", "")
			seen = append(seen, body)
			var st struct {
				Role string `json:"role"`
			}
			if json.Unmarshal([]byte(body), &st) == nil && st.Role == "leader" {
				leaders = append(leaders, i)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no single leader in 30s: %q", seen)
	return -1
}

func putFailures(fs []struct {
	Key       string `json:"key"`
	Error     string `json:"error"`
	AfterKill bool   `json:"afterKill"`
}) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  %s (after the kill: %v): %s", f.Key, f.AfterKill, f.Error)
	}
	return b.String()
}

// changes prints an observer's leaders, <nil> for none.
func changes(cs []*string) string {
	var out []string
	for _, c := range cs {
		out = append(out, str(c))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func str(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// checkEtcd3KV checks the puts, gets, deletes and the Txn before the kill.
// A new group answers at revision 1, so its first write makes revision 2.
func checkEtcd3KV(t *testing.T, r etcd3Report) {
	t.Helper()
	kv := r.KV
	if !slices.Equal(kv.PutRevisions, []int64{2, 3, 4, 5}) {
		t.Errorf("put revisions %v, want [2 3 4 5]", kv.PutRevisions)
	}
	if str(kv.Get) != "two" {
		t.Errorf("get a/2: %s, want two", str(kv.Get))
	}
	if want := map[string]string{"a/1": "one", "a/2": "two", "a/3": "three"}; !reflect.DeepEqual(kv.Prefix, want) || kv.Count != 3 {
		t.Errorf("get a/ prefix: %v (count %d), want %v (count 3)", kv.Prefix, kv.Count, want)
	}
	if !slices.Equal(kv.LimitedKeys, []string{"a/1", "a/2"}) || !kv.LimitedMore || kv.LimitedCount != 3 {
		t.Errorf("get a/ prefix limit 2: keys %v more %v count %d, want [a/1 a/2] true 3", kv.LimitedKeys, kv.LimitedMore, kv.LimitedCount)
	}
	if kv.UpdateRevision != 6 || str(kv.AtFirstRevision) != "one" {
		t.Errorf("update at %d, a/1 at revision 2: %s; want 6 and one", kv.UpdateRevision, str(kv.AtFirstRevision))
	}
	if l := kv.Latest; l.Value != "uno" || l.CreateRevision != 2 || l.ModRevision != 6 || l.Version != 2 {
		t.Errorf("a/1: %+v, want uno created at 2, modified at 6, version 2", l)
	}
	if !reflect.DeepEqual(kv.DeletedPrev, [][2]string{{"a/3", "three"}}) || kv.DeletedCount != 2 || kv.AfterDelete != nil || kv.Remaining != 0 {
		t.Errorf("deletes: previous %v, prefix deleted %d, a/3 after %s, %d left; want [[a/3 three]], 2, <nil>, 0",
			kv.DeletedPrev, kv.DeletedCount, str(kv.AfterDelete), kv.Remaining)
	}
	if x := r.Txn; !x.First || x.Second || !slices.Equal(x.SecondElse, []string{"2"}) || str(x.Value) != "2" {
		t.Errorf("txn: first %v, second %v with else %v, t = %s; want true, false with [2], 2", x.First, x.Second, x.SecondElse, str(x.Value))
	}
}

// checkEtcd3Puts checks that every acknowledged put reads back, at the
// revision acknowledged or, if a retry of a put whose answer was lost
// came later, after it; the loop went on through the kill.
func checkEtcd3Puts(t *testing.T, r etcd3Report) {
	t.Helper()
	p := r.Puts
	if p.AckedBeforeKill < 20 || len(p.Acked) < p.AckedBeforeKill+20 {
		t.Errorf("%d puts acknowledged, %d before the kill; want at least 20 before and 20 after", len(p.Acked), p.AckedBeforeKill)
	}
	var prev int64
	for i, a := range p.Acked {
		if want := fmt.Sprintf("w/%05d", i); a.Key != want || a.Value != fmt.Sprintf("v%d", i) {
			t.Errorf("acknowledged put %d: %s=%s, want %s=v%d", i, a.Key, a.Value, want, i)
		}
		if a.Rev <= prev {
			t.Errorf("put %s acknowledged at revision %d, after %d", a.Key, a.Rev, prev)
		}
		prev = a.Rev
		if s, ok := p.Stored[a.Key]; !ok || s.Value != a.Value || s.Rev < a.Rev {
			t.Errorf("acknowledged put %s=%s at %d reads back as %+v (present %v)", a.Key, a.Value, a.Rev, s, ok)
		}
	}
	if len(p.Stored) != len(p.Acked) {
		t.Errorf("%d w/ keys stored, %d puts acknowledged", len(p.Stored), len(p.Acked))
	}
}

// checkEtcd3Leases checks the lease kept alive through the kill and, if
// the script got that far, the one left to expire and the revoke.
func checkEtcd3Leases(t *testing.T, r etcd3Report, killed int, revoked bool) {
	t.Helper()
	k := r.Kept
	if k.Victim != fmt.Sprintf("n%d", killed) {
		t.Errorf("the script was told of %q, want n%d", k.Victim, killed)
	}
	if str(k.Value) != "k" || k.GrantedTTL != etcd3TTL || k.TTL <= 0 || k.TTL > etcd3TTL || !slices.Equal(k.Keys, []string{"l/kept"}) {
		t.Errorf("the kept lease three TTLs after the kill: l/kept=%s, TTL %d of %d, keys %v; want k, 0 < TTL <= %d of %d, [l/kept]",
			str(k.Value), k.TTL, k.GrantedTTL, k.Keys, etcd3TTL, etcd3TTL)
	}
	if k.KeepalivesAfterKill == 0 || len(k.Lost) != 0 {
		t.Errorf("the kept lease: %d keep-alives answered after the kill, lost %q; want some, none lost", k.KeepalivesAfterKill, k.Lost)
	}
	// A follower forwards keep-alives to the leader: none is refused.
	for _, f := range k.KeepaliveFailures {
		if strings.Contains(f.Error, "not leader") {
			t.Errorf("a keep-alive refused by a follower %+d ms from the kill: %s", f.Ms, f.Error)
		}
	}
	if str(r.Leases.ExpiringPresent) != "e" {
		t.Errorf("l/expiring right after its put: %s", str(r.Leases.ExpiringPresent))
	}
	if !revoked {
		return
	}
	t.Logf("the lease left to expire, granted just before the kill with a TTL of %ds, was gone %d ms after its grant began",
		etcd3TTL, r.Revoked.ExpiredAfterMs)
	if r.Revoked.AfterRevoke != nil {
		t.Errorf("l/kept after its lease's revoke: %s", str(r.Revoked.AfterRevoke))
	}
	// An expiry is never early; the client's clock starts before the grant.
	if r.Revoked.ExpiredAfterMs < etcd3TTL*1000 {
		t.Errorf("l/expiring gone %d ms after its lease's grant began, before its TTL of %ds", r.Revoked.ExpiredAfterMs, etcd3TTL)
	}
}

// checkEtcd3Election checks that alpha leads through the kill, and beta
// only once alpha resigns.
func checkEtcd3Election(t *testing.T, r etcd3Report) {
	t.Helper()
	e, a := r.Election, r.ElectionAfter
	if str(e.Leader) != "alpha" || str(e.Observed) != "alpha" || e.BetaElected {
		t.Errorf("election before the kill: leader %s, observed %s, beta elected %v; want alpha, alpha, false", str(e.Leader), str(e.Observed), e.BetaElected)
	}
	if str(a.LeaderAfterKill) != "alpha" || a.BetaElectedAfterKill {
		t.Errorf("election three TTLs after the kill: leader %s, beta elected %v; want alpha, false", str(a.LeaderAfterKill), a.BetaElectedAfterKill)
	}
	if str(a.LeaderAfterResign) != "beta" || str(a.Observed) != "beta" {
		t.Errorf("election after alpha resigned: leader %s, observed %s; want beta", str(a.LeaderAfterResign), str(a.Observed))
	}
	// The observer saw no leader but alpha until the resignation: only
	// beta (and no leader for a moment) after it.
	for i, c := range a.Changes {
		if c != nil && *c != "beta" || i == len(a.Changes)-1 && str(c) != "beta" {
			t.Errorf("the observer's changes %s, want beta (or none) only, ending with beta", changes(a.Changes))
			break
		}
	}
	if len(a.Changes) == 0 {
		t.Errorf("the observer saw no change after alpha resigned")
	}
	if len(a.Errors) != 0 {
		t.Errorf("campaign and observer errors: %q", a.Errors)
	}
}

// checkEtcd3Watch checks that the watch on w/, whose stream the killed
// leader served, resumed on another node and saw every write once, in
// order; and that the watch on l/ saw the leases' keys come and go.
func checkEtcd3Watch(t *testing.T, r etcd3Report) {
	t.Helper()
	w := r.Watch
	if len(w.Errors) != 0 {
		t.Errorf("watch errors: %q", w.Errors)
	}
	if len(w.Members) < 2 || w.Members[0] != w.LeaderBefore || w.LeaderAfter == w.LeaderBefore ||
		w.Members[len(w.Members)-1] == w.LeaderBefore || len(w.Disconnects) == 0 {
		t.Errorf("the watch stream was on %q with the leader %s before the kill and %s after, disconnected %q; "+
			"want it on the leader, then, disconnected by the kill, on another node",
			w.Members, w.LeaderBefore, w.LeaderAfter, w.Disconnects)
	}
	// The live watch, resumed by the client, equals a watch of the
	// history from the same start.
	if !reflect.DeepEqual(w.Events, w.History) {
		t.Errorf("the live watch saw %d events, the history from revision %d has %d; first difference: %s",
			len(w.Events), w.StartRevision, len(w.History), firstDiff(w.Events, w.History))
	}
	acked := map[int64]string{}
	for _, a := range r.Puts.Acked {
		acked[a.Rev] = a.Key
	}
	failed := map[string]bool{}
	for _, f := range r.Puts.Failures {
		failed[f.Key] = true
	}
	var prev int64
	for _, ev := range w.Events {
		if ev.Rev <= prev {
			t.Errorf("watch event %+v after revision %d: out of order or repeated", ev, prev)
		}
		prev = ev.Rev
		var i int
		if _, err := fmt.Sscanf(ev.Key, "w/%05d", &i); err != nil || ev.Value != fmt.Sprintf("v%d", i) || ev.Type != "PUT" ||
			ev.Rev < w.StartRevision || ev.Rev > w.EndRevision {
			t.Errorf("watch event %+v: want a PUT of w/N=vN in [%d, %d]", ev, w.StartRevision, w.EndRevision)
		}
		// An event no acknowledgement names is a put whose answer was
		// lost, retried by the client or the script.
		if key, ok := acked[ev.Rev]; ok && key != ev.Key {
			t.Errorf("watch event %+v: the put acknowledged at %d was of %s", ev, ev.Rev, key)
		} else if !ok {
			t.Logf("watch event %+v: a put whose answer was lost (the script's attempts failed: %v)", ev, failed[ev.Key])
		}
	}
	seen := map[int64]bool{}
	for _, ev := range w.Events {
		seen[ev.Rev] = true
	}
	for _, a := range r.Puts.Acked {
		if !seen[a.Rev] {
			t.Errorf("the watch missed the acknowledged put %s at %d", a.Key, a.Rev)
		}
	}

	// l/: both keys put, the expiring one deleted by its lease's expiry,
	// then the kept one by the revoke.
	var got []string
	for i, ev := range w.LeaseEvents {
		got = append(got, ev.Type+" "+ev.Key)
		if i > 0 && ev.Rev <= w.LeaseEvents[i-1].Rev {
			t.Errorf("lease watch events out of order: %+v", w.LeaseEvents)
		}
	}
	if want := []string{"PUT l/kept", "PUT l/expiring", "DELETE l/expiring", "DELETE l/kept"}; !slices.Equal(got, want) {
		t.Errorf("watch of l/: %q, want %q", got, want)
	}
}

func firstDiff(a, b []etcd3Event) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("#%d: %+v, history %+v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d and %d events)", len(a), len(b))
}
