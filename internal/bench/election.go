package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
)

// tenure bench election runs a group of `tenure elect` processes on one
// store and times what a user of the election waits for: the leaderless
// gap after the leader is killed, against the earliest moment the lease
// lets a follower take over; the gap of a graceful handover; and the store
// requests the group makes in an hour of stable leadership. It learns each
// member's view from its /status (election.Status) and its store requests
// from its /metrics.

// Timing is a named set of election timings.
type Timing struct {
	Name                                       string
	Frequent, Infrequent, Timeout, Renew, Peer time.Duration
	Retry                                      []time.Duration
	Window                                     time.Duration // default cost window
}

// TimingNamed returns the timing called name: default (the library's
// defaults) or fast (the defaults divided by 20).
func TimingNamed(name string) (Timing, bool) {
	for _, t := range timings() {
		if t.Name == name {
			return t, true
		}
	}
	return Timing{}, false
}

func timings() []Timing {
	return []Timing{
		{Name: "default", Frequent: election.DefaultFrequentInterval, Infrequent: election.DefaultInfrequentInterval,
			Timeout: election.DefaultLeaderTimeout, Renew: election.DefaultRenewDeadline, Peer: election.DefaultPeerTimeout,
			Retry: election.DefaultRetrySchedule, Window: 5 * time.Minute},
		// fast is the defaults divided by 20, so that a run takes seconds and
		// the intervals keep their proportions.
		{Name: "fast", Frequent: 250 * time.Millisecond, Infrequent: 1500 * time.Millisecond, Timeout: 750 * time.Millisecond,
			Renew: 500 * time.Millisecond, Peer: 150 * time.Millisecond,
			Retry: []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}, Window: 30 * time.Second},
	}
}

func (t Timing) retryString() string {
	parts := make([]string, len(t.Retry))
	for i, d := range t.Retry {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// args are the members' timing flags: none for the defaults, so that the
// members run exactly what a user gets.
func (t Timing) args() []string {
	if t.Name == "default" {
		return nil
	}
	return []string{"--frequent", t.Frequent.String(), "--infrequent", t.Infrequent.String(),
		"--leader-timeout", t.Timeout.String(), "--renew-deadline", t.Renew.String(),
		"--peer-timeout", t.Peer.String(), "--retry", t.retryString()}
}

func (t Timing) String() string {
	return fmt.Sprintf("FrequentInterval %v, InfrequentInterval %v, LeaderTimeout %v, RenewDeadline %v, PeerTimeout %v, RetrySchedule %s",
		t.Frequent, t.Infrequent, t.Timeout, t.Renew, t.Peer, t.retryString())
}

// MaxElectionNodes is the largest group the election benchmark runs.
const MaxElectionNodes = 32

// memberConfigs are the member configurations the bench can compare.
var memberConfigs = map[string]string{
	"store": "store only (no flags: followers poll the lock four times per lease and when the held version would expire)",
	"addr":  "an address only (--advertise: peer mode, followers long-poll the leader over HTTPS, its key pinned by the lock record)",
	"tls":   "an address and certificates (--advertise --tls-cert --tls-key --tls-ca: peer mode checked by a CA)",
}

// IsMemberConfig reports whether name is a member configuration the
// election benchmark knows: store, addr or tls.
func IsMemberConfig(name string) bool {
	_, ok := memberConfigs[name]
	return ok
}

// ElectionConfig is a run of the election benchmark.
type ElectionConfig struct {
	// Store is the store URL the members share; the lock is a new key
	// under it. "": a new temporary directory, removed afterwards.
	Store string
	// Exe is the tenure program each member runs as `tenure elect`.
	Exe    string
	Nodes  int // members in the group, 2 to MaxElectionNodes
	Rounds int // crash rounds, and as many handover rounds
	// Configs are the member configurations to run one after the other
	// (see IsMemberConfig).
	Configs []string
	Timing  Timing
	// Window is how long the store requests of stable leadership are
	// counted.
	Window time.Duration
	// Poll is how often each member's /status is read while a transition
	// is timed: the resolution of the gaps.
	Poll    time.Duration
	Verbose bool      // copy the members' logs to Stderr
	Stderr  io.Writer // progress, and the members' logs
}

// Election runs the election benchmark: for each of cfg.Configs, a group
// of `tenure elect` processes through crashes and handovers, then a window
// of stable leadership. It stops its members and removes their lock.
func Election(ctx context.Context, cfg ElectionConfig) ([]*ElectionResult, error) {
	storeURL := cfg.Store
	if storeURL == "" {
		dir, err := os.MkdirTemp("", "tenure-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		storeURL = "file://" + dir
	}
	if _, err := benchLockURL(storeURL); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "tenure-bench-tls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var files tlsutil.Files
	if slices.Contains(cfg.Configs, "tls") {
		ca, err := tlsutil.NewCA("tenure bench")
		if err != nil {
			return nil, err
		}
		if files, err = ca.WriteFiles(tmp, "peer", "127.0.0.1"); err != nil {
			return nil, err
		}
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()

	var results []*ElectionResult
	for _, mode := range cfg.Configs {
		lock, err := benchLockURL(storeURL)
		if err != nil {
			return nil, err
		}
		lockStoreURL, key, err := store.SplitKeyURL(lock)
		if err != nil {
			return nil, err
		}
		// Open the store before any member starts, so that a bad URL or
		// missing credentials fail first. The bench reads the lock record
		// through it after each kill.
		st, err := store.Open(ctx, lockStoreURL)
		if err != nil {
			return nil, err
		}
		b := &electionBench{
			stderr: &syncWriter{w: cfg.Stderr}, exe: cfg.Exe, lock: lock, st: st, key: key, timing: cfg.Timing,
			config: mode, peer: mode != "store", tls: files, poll: cfg.Poll, verbose: cfg.Verbose, client: client,
		}
		res, err := b.run(ctx, cfg.Nodes, cfg.Rounds, cfg.Window)
		// Stop the members and remove their lock, so that the store is
		// left as it was found (but for the directory a file:// store
		// keeps).
		b.stopAll()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = st.Delete(dctx, key, store.Cond{})
		cancel()
		st.Close()
		if err != nil {
			return nil, fmt.Errorf("--config %s: %w", mode, err)
		}
		res.Store = storeURL
		results = append(results, res)
	}
	return results, nil
}

// PrintElection prints the results of Election as tables, and compares
// them when there are several.
func PrintElection(w io.Writer, results []*ElectionResult) error {
	for _, res := range results {
		if err := res.print(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if len(results) > 1 {
		return printBenchComparison(w, results)
	}
	return nil
}

// benchLockURL returns the URL of a new lock under storeURL: its path gets
// bench-RANDOM/leader.json; the query stays the store's.
func benchLockURL(storeURL string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", fmt.Errorf("--store %q: %w", storeURL, err)
	}
	switch u.Scheme {
	case "":
		return "", fmt.Errorf("--store %q has no scheme; want e.g. file:///var/tmp/tenure or s3://bucket/prefix?region=R", storeURL)
	case "mem":
		return "", fmt.Errorf("--store %q: the members are separate processes, and a mem:// store lives in one; use file:// or a shared store", storeURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/bench-" + strings.ToLower(rand.Text()[:10]) + "/leader.json"
	u.RawPath = ""
	return u.String(), nil
}

type electionBench struct {
	stderr  io.Writer // progress, and the members' logs with --verbose
	exe     string
	lock    string
	st      *store.Store
	key     string
	timing  Timing
	config  string // a key of memberConfigs
	peer    bool   // the followers' steady mode is peer
	tls     tlsutil.Files
	poll    time.Duration
	verbose bool
	client  *http.Client

	members  []*benchMember // by node number, n1 first
	overlaps int            // sampling passes in which two members reported leading
}

// syncWriter serialises writes from the members' log readers and the
// bench itself.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// benchMember is one `tenure elect` process.
type benchMember struct {
	id     string
	cmd    *exec.Cmd
	addr   string        // its /status and /metrics
	exited chan struct{} // closed once the process has exited and been waited for
	err    error         // Wait's result, valid after exited

	mu   sync.Mutex
	tail []string // its last log lines
}

func (m *benchMember) logTail() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.tail) == 0 {
		return "(no output)"
	}
	return strings.Join(m.tail, "\n")
}

func (m *benchMember) gone() bool {
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// start runs member id and waits until it serves /status.
func (b *electionBench) start(ctx context.Context, id string) (*benchMember, error) {
	args := []string{"elect", "--lock", b.lock, "--id", id, "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}
	args = append(args, b.timing.args()...)
	switch b.config {
	case "addr":
		args = append(args, "--advertise", "127.0.0.1:0")
	case "tls":
		args = append(args, "--advertise", "127.0.0.1:0", "--tls-cert", b.tls.Cert, "--tls-key", b.tls.Key, "--tls-ca", b.tls.CA)
	}
	cmd := exec.Command(b.exe, args...)
	cmd.SysProcAttr = memberProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting member %s: %w", id, err)
	}
	m := &benchMember{id: id, cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		// Read the log to its end before Wait, as os/exec requires.
		m.readLog(stderr, addr, b.verbose, b.stderr)
		m.err = cmd.Wait()
		close(m.exited)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case m.addr = <-addr:
		return m, nil
	case <-m.exited:
		return nil, fmt.Errorf("member %s exited at start (%v):\n%s", id, m.err, m.logTail())
	case <-timer.C:
		err = fmt.Errorf("member %s did not serve /status within 30s:\n%s", id, m.logTail())
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = cmd.Process.Kill()
	<-m.exited
	return nil, err
}

// readLog keeps the member's last log lines and sends the address of its
// HTTP server, which `tenure elect` logs as it starts serving.
func (m *benchMember) readLog(r io.Reader, addr chan<- string, verbose bool, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		m.mu.Lock()
		m.tail = append(m.tail, line)
		if len(m.tail) > 40 {
			m.tail = m.tail[len(m.tail)-40:]
		}
		m.mu.Unlock()
		if verbose {
			fmt.Fprintf(w, "%s: %s\n", m.id, line)
		}
		if !sent {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving HTTP" && rec.Addr != "" {
				addr <- rec.Addr
				sent = true
			}
		}
	}
	// A line too long to scan still must not block the member on a full
	// pipe.
	_, _ = io.Copy(io.Discard, r)
}

// signal sends sig to m's process; an exited process is not an error.
func (m *benchMember) signal(sig syscall.Signal) {
	if !m.gone() {
		_ = m.cmd.Process.Signal(sig)
	}
}

// stopAll kills every member still running and waits for each.
func (b *electionBench) stopAll() {
	for _, m := range b.members {
		if m != nil {
			m.signal(syscall.SIGKILL)
		}
	}
	for _, m := range b.members {
		if m != nil {
			<-m.exited
		}
	}
}

// benchSample is one reading of a member's /status.
type benchSample struct {
	m  *benchMember
	at time.Time // when the answer arrived
	ok bool      // the member answered
	st election.Status
}

func (b *electionBench) sample(ctx context.Context, m *benchMember) benchSample {
	s := benchSample{m: m}
	if !m.gone() {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+m.addr+"/status", nil)
		if err == nil {
			resp, err := b.client.Do(req)
			if err == nil {
				var st struct {
					Election *election.Status `json:"election"`
				}
				err = json.NewDecoder(resp.Body).Decode(&st)
				_ = resp.Body.Close()
				s.ok = err == nil && resp.StatusCode == http.StatusOK && st.Election != nil
				if s.ok {
					s.st = *st.Election
				}
			}
		}
	}
	s.at = time.Now()
	return s
}

// sampleAll reads every member's /status one after another, first of
// all first: a transition seen in first is thus timed before anything
// seen in the others in the same pass.
func (b *electionBench) sampleAll(ctx context.Context, first *benchMember) []benchSample {
	order := make([]*benchMember, 0, len(b.members))
	if first != nil {
		order = append(order, first)
	}
	for _, m := range b.members {
		if m != first {
			order = append(order, m)
		}
	}
	ss := make([]benchSample, len(order))
	leading := 0
	for i, m := range order {
		ss[i] = b.sample(ctx, m)
		if ss[i].ok && ss[i].st.Leader {
			leading++
		}
	}
	if leading > 1 {
		b.overlaps++
	}
	return ss
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// transitionLimit bounds any wait for a leader: a follower reads at least
// every InfrequentInterval and takes an abandoned lock LeaderTimeout after
// it last saw it change.
func (b *electionBench) transitionLimit() time.Duration {
	return 2*b.timing.Infrequent + 2*b.timing.Timeout + 30*time.Second
}

// waitStable waits until one member leads and every other follows it in
// the steady mode (peer, infrequent, or watch on etcd) and returns the
// leader's sample.
func (b *electionBench) waitStable(ctx context.Context) (benchSample, error) {
	want := "infrequent"
	if b.peer {
		want = "peer"
	}
	deadline := time.Now().Add(b.transitionLimit())
	for {
		ss := b.sampleAll(ctx, nil)
		var leaders []benchSample
		stable := true
		for _, s := range ss {
			if s.m.gone() {
				return benchSample{}, fmt.Errorf("member %s exited (%v):\n%s", s.m.id, s.m.err, s.m.logTail())
			}
			if !s.ok {
				stable = false
			} else if s.st.Leader {
				leaders = append(leaders, s)
			}
		}
		if stable && len(leaders) == 1 {
			l := leaders[0]
			for _, s := range ss {
				// On a store that notifies changes (etcd) followers watch
				// instead of polling: that is their steady mode too.
				steady := s.st.Mode == want || s.st.Mode == "watch"
				if s.m != l.m && (!steady || s.st.LeaderID != l.st.ServerID || s.st.LeaderTerm != l.st.Term || s.st.Released) {
					stable = false
				}
			}
			if stable {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			var views []string
			for _, s := range ss {
				views = append(views, fmt.Sprintf("%s: answered %v, leader %v, term %d, mode %q, follows %q term %d, last error %q",
					s.m.id, s.ok, s.st.Leader, s.st.Term, s.st.Mode, s.st.LeaderID, s.st.LeaderTerm, s.st.LastError))
			}
			return benchSample{}, fmt.Errorf("no stable leadership within %v:\n  %s", b.transitionLimit(), strings.Join(views, "\n  "))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return benchSample{}, err
		}
	}
}

// settle waits a random part of the interval at which the followers hear
// from the leader (each renewal in peer mode, each read otherwise), so that
// kills and stops fall at every phase of it.
func (b *electionBench) settle(ctx context.Context) error {
	span := b.timing.Infrequent
	if b.peer {
		span = b.timing.Frequent
	}
	return sleepCtx(ctx, time.Duration(mrand.Int64N(int64(span))))
}

func (b *electionBench) replace(old, m *benchMember) {
	for i := range b.members {
		if b.members[i] == old {
			b.members[i] = m
		}
	}
}

// crashRound is one SIGKILL of the leader. Times are from the kill.
type crashRound struct {
	Killed    string `json:"killed"`
	Term      uint64 `json:"term"`
	NewLeader string `json:"newLeader"`
	NewTerm   uint64 `json:"newTerm"`
	// Gap: until the first /status answer of another member that leads.
	Gap time.Duration `json:"gapNanos"`
	// Limit: the earliest moment a follower's lease expiry allowed a
	// takeover (see limitDefinition); LimitFollower is that follower.
	Limit         time.Duration `json:"limitNanos"`
	LimitFollower string        `json:"limitFollower"`
	OverLimit     time.Duration `json:"overLimitNanos"`
	// LeaderLease: the start of the killed leader's last successful
	// renewal plus LeaderTimeout, from its last /status before the kill.
	LeaderLease time.Duration `json:"leaderLeaseNanos"`
	// FollowersCurrent: followers that had seen the killed leader's last
	// write when it was killed.
	FollowersCurrent int `json:"followersCurrent"`
	Followers        int `json:"followers"`
}

const limitDefinition = "limit: for each follower, the moment it first saw the version of the lock record the killed leader wrote last " +
	"(the bench's clock when it read the follower's /status, minus the follower's unchangedNanos), plus LeaderTimeout; " +
	"the earliest over the followers, measured from the kill. No follower may take the lock before it. " +
	"For a follower that had already seen that version at the kill, it is kill + LeaderTimeout - unchanged at the kill."

func (b *electionBench) crash(ctx context.Context) (crashRound, error) {
	var r crashRound
	var pre []benchSample
	var leader benchSample
	for {
		l, err := b.waitStable(ctx)
		if err != nil {
			return r, err
		}
		if err := b.settle(ctx); err != nil {
			return r, err
		}
		pre = b.sampleAll(ctx, l.m)
		if leader = pre[0]; leader.ok && leader.st.Leader && leader.st.Term == l.st.Term {
			break
		}
	}
	victim := leader.m
	victim.signal(syscall.SIGKILL)
	killed := time.Now()
	r.Killed, r.Term = victim.id, leader.st.Term
	renewStart := leader.at.Add(leader.st.Remaining - b.timing.Renew)
	r.LeaderLease = renewStart.Add(b.timing.Timeout).Sub(killed)

	// The record as the killed leader left it. Its writes ended with the
	// kill; read it while the followers wait out the lease.
	type final struct {
		version string
		err     error
	}
	finalc := make(chan final, 1)
	go func() {
		<-victim.exited
		var f final
		for attempt := 0; attempt < 5; attempt++ {
			var data []byte
			data, f.version, f.err = b.st.Get(ctx, b.key)
			if f.err == nil {
				rec, err := election.DecodeRecord(data)
				if err == nil && (rec.Session != leader.st.Session || rec.Term != leader.st.Term) {
					err = fmt.Errorf("the lock names %s (term %d), not the killed leader", rec.LeaderID, rec.Term)
				}
				f.err = err
				break
			}
			if sleepCtx(ctx, 100*time.Millisecond) != nil {
				break
			}
		}
		finalc <- f
	}()

	// firstSeen[follower][version]: when the follower first saw version.
	firstSeen := map[*benchMember]map[string]time.Time{}
	note := func(s benchSample) {
		if !s.ok || s.st.RecordVersion == "" {
			return
		}
		seen := firstSeen[s.m]
		if seen == nil {
			seen = map[string]time.Time{}
			firstSeen[s.m] = seen
		}
		if _, ok := seen[s.st.RecordVersion]; !ok {
			seen[s.st.RecordVersion] = s.at.Add(-s.st.Unchanged)
		}
	}
	for _, s := range pre[1:] {
		note(s)
	}
	deadline := killed.Add(b.transitionLimit())
	var next benchSample
	for next.m == nil {
		if err := sleepCtx(ctx, b.poll); err != nil {
			return r, err
		}
		for _, s := range b.sampleAll(ctx, victim)[1:] {
			if s.m.gone() {
				return r, fmt.Errorf("member %s exited (%v):\n%s", s.m.id, s.m.err, s.m.logTail())
			}
			note(s)
			if s.ok && s.st.Leader && s.st.Term > r.Term && next.m == nil {
				next = s
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("no member took over within %v of killing %s", b.transitionLimit(), victim.id)
		}
	}
	r.NewLeader, r.NewTerm = next.m.id, next.st.Term
	r.Gap = next.at.Sub(killed)

	f := <-finalc
	last := f.version
	if f.err != nil {
		// Fall back on the version the leader reported last: a renewal
		// between that answer and the kill (a window of a millisecond or
		// so) would make the limit early, never late.
		last = leader.st.RecordVersion
		fmt.Fprintf(b.stderr, "tenure bench election: reading the killed leader's last record: %v; using the version it last reported\n", f.err)
	}
	first := time.Time{}
	for _, s := range pre[1:] {
		r.Followers++
		if s.ok && s.st.RecordVersion == last {
			r.FollowersCurrent++
		}
		if at, ok := firstSeen[s.m][last]; ok && (first.IsZero() || at.Before(first)) {
			first, r.LimitFollower = at, s.m.id
		}
	}
	if first.IsZero() {
		return r, fmt.Errorf("no follower was seen holding the killed leader's last version %q", last)
	}
	r.Limit = first.Add(b.timing.Timeout).Sub(killed)
	r.OverLimit = r.Gap - r.Limit

	m, err := b.start(ctx, victim.id)
	if err != nil {
		return r, err
	}
	b.replace(victim, m)
	return r, nil
}

// handoverRound is one graceful stop of the leader. Times are from SIGTERM.
type handoverRound struct {
	Stopped   string `json:"stopped"`
	Term      uint64 `json:"term"`
	NewLeader string `json:"newLeader"`
	NewTerm   uint64 `json:"newTerm"`
	// StepDown: until the old leader's first /status answer that it does
	// not lead (or no answer).
	StepDown time.Duration `json:"stepDownNanos"`
	// Gap: from then until the first answer of another member that leads.
	Gap time.Duration `json:"gapNanos"`
}

func (b *electionBench) handover(ctx context.Context) (handoverRound, error) {
	var r handoverRound
	var leader benchSample
	for {
		l, err := b.waitStable(ctx)
		if err != nil {
			return r, err
		}
		if err := b.settle(ctx); err != nil {
			return r, err
		}
		if leader = b.sampleAll(ctx, l.m)[0]; leader.ok && leader.st.Leader && leader.st.Term == l.st.Term {
			break
		}
	}
	old := leader.m
	old.signal(syscall.SIGTERM)
	termAt := time.Now()
	r.Stopped, r.Term = old.id, leader.st.Term
	var stopped, started time.Time
	deadline := termAt.Add(b.transitionLimit())
	for started.IsZero() {
		// The old leader is read first in each pass, so its step-down is
		// timed before any takeover seen in the same pass.
		var oldLeadingAt time.Time
		for _, s := range b.sampleAll(ctx, old) {
			switch {
			case s.m == old:
				if stopped.IsZero() && (!s.ok || !s.st.Leader) {
					stopped = s.at
				}
				oldLeadingAt = s.at
			case s.m.gone():
				return r, fmt.Errorf("member %s exited (%v):\n%s", s.m.id, s.m.err, s.m.logTail())
			case s.ok && s.st.Leader && s.st.Term > r.Term && started.IsZero():
				r.NewLeader, r.NewTerm, started = s.m.id, s.st.Term, s.at
			}
		}
		if !started.IsZero() && stopped.IsZero() {
			// The whole handover fell between the old leader's answer and
			// the new one's in one pass (they are read one after another,
			// not at once): it stepped down after oldLeadingAt, so the gap
			// counted from there is an upper bound.
			stopped = oldLeadingAt
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("no member took over within %v of stopping %s", b.transitionLimit(), old.id)
		}
		if started.IsZero() {
			if err := sleepCtx(ctx, b.poll); err != nil {
				return r, err
			}
		}
	}
	r.StepDown, r.Gap = stopped.Sub(termAt), started.Sub(stopped)

	t := time.NewTimer(b.timing.Renew + 10*time.Second)
	defer t.Stop()
	select {
	case <-old.exited:
	case <-t.C:
		old.signal(syscall.SIGKILL)
		<-old.exited
		return r, fmt.Errorf("member %s did not exit within %v of SIGTERM:\n%s", old.id, b.timing.Renew+10*time.Second, old.logTail())
	case <-ctx.Done():
		return r, ctx.Err()
	}
	if old.err != nil {
		return r, fmt.Errorf("member %s exited with %v after SIGTERM:\n%s", old.id, old.err, old.logTail())
	}
	m, err := b.start(ctx, old.id)
	if err != nil {
		return r, err
	}
	b.replace(old, m)
	return r, nil
}

// memberCost is one member's store requests over the cost window.
type memberCost struct {
	ID      string             `json:"id"`
	Role    string             `json:"role"`
	PerHour float64            `json:"perHour"`
	ByOp    map[string]float64 `json:"perHourByOp"`
	Count   float64            `json:"count"`
	Window  time.Duration      `json:"windowNanos"`
}

type costResult struct {
	Window time.Duration `json:"windowNanos"`
	Mode   string        `json:"mode"`
	// Stable is false if leadership changed during the window.
	Stable    bool         `json:"stable"`
	Members   []memberCost `json:"members"`
	Leader    float64      `json:"leaderPerHour"`
	Follower  float64      `json:"followerPerHour"` // the mean over followers
	Group     float64      `json:"groupPerHour"`
	Followers int          `json:"followers"`
}

func (b *electionBench) cost(ctx context.Context, window time.Duration) (costResult, error) {
	res := costResult{Window: window, Mode: "store polling", Stable: true}
	if b.peer {
		res.Mode = "peer"
	}
	l, err := b.waitStable(ctx)
	if err != nil {
		return res, err
	}
	type scrape struct {
		at     time.Time
		counts map[string]float64
	}
	scrapeAll := func() ([]scrape, error) {
		out := make([]scrape, len(b.members))
		for i, m := range b.members {
			c, err := b.storeRequests(ctx, m)
			if err != nil {
				return nil, err
			}
			out[i] = scrape{at: time.Now(), counts: c}
		}
		return out, nil
	}
	before, err := scrapeAll()
	if err != nil {
		return res, err
	}
	for end := time.Now().Add(window); time.Now().Before(end); {
		if err := sleepCtx(ctx, min(time.Second, time.Until(end))); err != nil {
			return res, err
		}
		for _, s := range b.sampleAll(ctx, nil) {
			if s.m.gone() {
				return res, fmt.Errorf("member %s exited (%v):\n%s", s.m.id, s.m.err, s.m.logTail())
			}
			if (s.m == l.m && (!s.ok || !s.st.Leader || s.st.Term != l.st.Term)) || (s.m != l.m && s.ok && s.st.Leader) {
				res.Stable = false
			}
		}
	}
	after, err := scrapeAll()
	if err != nil {
		return res, err
	}
	for i, m := range b.members {
		mc := memberCost{ID: m.id, Role: "follower", ByOp: map[string]float64{}, Window: after[i].at.Sub(before[i].at)}
		if m == l.m {
			mc.Role = "leader"
		}
		scale := float64(time.Hour) / float64(mc.Window)
		for op, n := range after[i].counts {
			if d := n - before[i].counts[op]; d > 0 {
				mc.Count += d
				mc.ByOp[op] = d * scale
			}
		}
		mc.PerHour = mc.Count * scale
		res.Members = append(res.Members, mc)
		res.Group += mc.PerHour
		if m == l.m {
			res.Leader = mc.PerHour
		} else {
			res.Follower += mc.PerHour
			res.Followers++
		}
	}
	res.Follower /= float64(res.Followers)
	if !res.Stable {
		fmt.Fprintln(b.stderr, "tenure bench election: leadership changed during the cost window; its figures include a transition")
	}
	return res, nil
}

// storeRequests reads tenure_store_requests_total from m's /metrics,
// summed by operation and condition ("get", "put if-match", ...).
func (b *electionBench) storeRequests(ctx context.Context, m *benchMember) (map[string]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+m.addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of member %s: %w", m.id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of member %s: %w", m.id, err)
	}
	return parseStoreRequests(string(body))
}

// parseStoreRequests sums the tenure_store_requests_total samples of a
// Prometheus text exposition by op and cond.
func parseStoreRequests(text string) (map[string]float64, error) {
	const name = "tenure_store_requests_total{"
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("metrics: cannot read %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: cannot read %q: %w", line, err)
		}
		labels := line[len(name):end]
		key := promLabel(labels, "op")
		if c := promLabel(labels, "cond"); c != "" && c != "unconditional" {
			key += " " + c
		}
		out[key] += v
	}
	return out, nil
}

func promLabel(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// benchStats summarises durations: nearest-rank percentiles.
type benchStats struct {
	N   int           `json:"n"`
	Min time.Duration `json:"minNanos"`
	P50 time.Duration `json:"p50Nanos"`
	P90 time.Duration `json:"p90Nanos"`
	Max time.Duration `json:"maxNanos"`
}

func summarize(ds []time.Duration) benchStats {
	if len(ds) == 0 {
		return benchStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return benchStats{N: len(s), Min: s[0], P50: rank(0.5), P90: rank(0.9), Max: s[len(s)-1]}
}

// ElectionResult is what the election benchmark measured for one member
// configuration.
type ElectionResult struct {
	Store        string          `json:"store"`
	Nodes        int             `json:"nodes"`
	Rounds       int             `json:"rounds"`
	Config       string          `json:"config"`
	ConfigDetail string          `json:"configDetail"`
	Peer         bool            `json:"peer"`
	Timing       string          `json:"timing"`
	TimingDetail string          `json:"timingDetail"`
	Poll         time.Duration   `json:"pollNanos"`
	Crash        []crashRound    `json:"crashRounds"`
	Handover     []handoverRound `json:"handoverRounds"`

	CrashGap       benchStats `json:"crashGap"`
	CrashLimit     benchStats `json:"crashLimit"`
	CrashOverLimit benchStats `json:"crashOverLimit"`
	LeaderLease    benchStats `json:"leaderLease"`
	HandoverGap    benchStats `json:"handoverGap"`
	StepDown       benchStats `json:"stepDown"`
	Cost           costResult `json:"cost"`
	// Overlaps counts /status passes in which two members said they led.
	// Each pass reads the members one after another, within a
	// millisecond or so; it must be 0.
	Overlaps        int    `json:"overlaps"`
	LimitDefinition string `json:"limitDefinition"`
}

func (b *electionBench) run(ctx context.Context, nodes, rounds int, window time.Duration) (*ElectionResult, error) {
	res := &ElectionResult{Nodes: nodes, Rounds: rounds, Config: b.config, ConfigDetail: memberConfigs[b.config], Peer: b.peer, Timing: b.timing.Name,
		TimingDetail: b.timing.String(), Poll: b.poll, LimitDefinition: limitDefinition}
	progress := func(format string, args ...any) {
		fmt.Fprintf(b.stderr, "tenure bench election: "+format+"\n", args...)
	}
	progress("%d members, %s, %s timing, lock %s", nodes, memberConfigs[b.config], b.timing.Name, b.lock)
	for i := range nodes {
		m, err := b.start(ctx, "n"+strconv.Itoa(i+1))
		if err != nil {
			return nil, err
		}
		b.members = append(b.members, m)
	}
	progress("counting store requests over %v of stable leadership", window)
	cost, err := b.cost(ctx, window)
	if err != nil {
		return nil, err
	}
	res.Cost = cost
	progress("store requests per hour: group %.0f, leader %.0f, follower %.0f", cost.Group, cost.Leader, cost.Follower)
	var gaps, limits, over, leases, hgaps, steps []time.Duration
	for i := range rounds {
		c, err := b.crash(ctx)
		if err != nil {
			return nil, fmt.Errorf("crash round %d: %w", i+1, err)
		}
		res.Crash = append(res.Crash, c)
		gaps, limits, over, leases = append(gaps, c.Gap), append(limits, c.Limit), append(over, c.OverLimit), append(leases, c.LeaderLease)
		progress("crash %d/%d: killed %s (term %d); %s leads (term %d) after %v; limit %v; over it by %v",
			i+1, rounds, c.Killed, c.Term, c.NewLeader, c.NewTerm, roundDur(c.Gap), roundDur(c.Limit), roundDur(c.OverLimit))
		h, err := b.handover(ctx)
		if err != nil {
			return nil, fmt.Errorf("handover round %d: %w", i+1, err)
		}
		res.Handover = append(res.Handover, h)
		hgaps, steps = append(hgaps, h.Gap), append(steps, h.StepDown)
		progress("handover %d/%d: stopped %s (term %d); %s leads (term %d) %v after it stopped leading",
			i+1, rounds, h.Stopped, h.Term, h.NewLeader, h.NewTerm, roundDur(h.Gap))
	}
	res.CrashGap, res.CrashLimit, res.CrashOverLimit = summarize(gaps), summarize(limits), summarize(over)
	res.LeaderLease, res.HandoverGap, res.StepDown = summarize(leases), summarize(hgaps), summarize(steps)
	res.Overlaps = b.overlaps
	if b.overlaps > 0 {
		return res, fmt.Errorf("two members reported leading in the same /status pass %d times", b.overlaps)
	}
	return res, nil
}

func roundDur(d time.Duration) time.Duration {
	switch a := max(d, -d); {
	case a >= 10*time.Second:
		return d.Round(10 * time.Millisecond)
	case a >= time.Second:
		return d.Round(time.Millisecond)
	case a >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func (r *ElectionResult) print(w io.Writer) error {
	fmt.Fprintf(w, "tenure bench election: %d members as OS processes (tenure elect), %s\n", r.Nodes, r.ConfigDetail)
	fmt.Fprintf(w, "store   %s\n", r.Store)
	fmt.Fprintf(w, "timing  %s: %s\n", r.Timing, r.TimingDetail)
	fmt.Fprintf(w, "rounds  %d crash (SIGKILL of the leader) and %d handover (SIGTERM: it releases the lock);\n", len(r.Crash), len(r.Handover))
	fmt.Fprintf(w, "        each member's /status read every %v while a transition was timed\n\n", r.Poll)

	fmt.Fprintf(w, "%-46s %9s %9s %9s %9s %4s\n", "", "min", "p50", "p90", "max", "n")
	row := func(name string, s benchStats) {
		fmt.Fprintf(w, "%-46s %9v %9v %9v %9v %4d\n", name, roundDur(s.Min), roundDur(s.P50), roundDur(s.P90), roundDur(s.Max), s.N)
	}
	row("crash: leaderless gap after SIGKILL", r.CrashGap)
	row("  limit: lease expiry as the followers saw it", r.CrashLimit)
	row("  gap - limit", r.CrashOverLimit)
	row("  (lease by the leader's last renewal)", r.LeaderLease)
	row("handover: leaderless gap", r.HandoverGap)
	row("  (old leader's step-down after SIGTERM)", r.StepDown)

	c := r.Cost
	fmt.Fprintf(w, "\nstore requests per hour, %s, counted over %v of stable leadership:\n", c.Mode, c.Window)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range c.Members {
		var ops []string
		for op, n := range m.ByOp {
			ops = append(ops, fmt.Sprintf("%s %.0f", op, n))
		}
		slices.Sort(ops)
		fmt.Fprintf(tw, "  %s\t%s\t%6.0f/h\t%s\n", m.ID, m.Role, m.PerHour, strings.Join(ops, ", "))
	}
	fmt.Fprintf(tw, "  group\t\t%6.0f/h\tleader %.0f + %d followers x %.0f\n", c.Group, c.Leader, c.Followers, c.Follower)
	if err := tw.Flush(); err != nil {
		return err
	}
	if !c.Stable {
		fmt.Fprintln(w, "  (leadership changed during the window: these figures include a transition)")
	}
	fmt.Fprintf(w, "\ntwo members seen leading in one /status pass: %d\n\n", r.Overlaps)
	fmt.Fprintln(w, "gap: from the kill (or from the first /status answer of the stopped leader that it no longer leads)")
	fmt.Fprintln(w, "     to the first /status answer of another member that leads, with a higher term.")
	fmt.Fprintln(w, wrap(r.LimitDefinition, 100))
	fmt.Fprintln(w, "lease by the leader's last renewal: its start (from the killed leader's last /status) + LeaderTimeout.")
	return nil
}

func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n      ")
			n = 6
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// printBenchComparison sets the configurations side by side.
func printBenchComparison(w io.Writer, rs []*ElectionResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "config\tcrash gap min / p50 / max\tlease at the kill p50\thandover gap p50\tgroup store requests/h")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%v / %v / %v\t%v\t%v\t%.0f\n", r.Config, roundDur(r.CrashGap.Min), roundDur(r.CrashGap.P50), roundDur(r.CrashGap.Max),
			roundDur(r.LeaderLease.P50), roundDur(r.HandoverGap.P50), r.Cost.Group)
	}
	return tw.Flush()
}
