package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/tests/v3/robustness/client"
	"go.etcd.io/etcd/tests/v3/robustness/identity"
	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
	"go.etcd.io/etcd/tests/v3/robustness/traffic"
	"go.etcd.io/etcd/tests/v3/robustness/validate"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/s3store"
)

// faultPause is how long each fault lasts: SIGSTOP to SIGCONT, black
// hole to heal. Each is several heartbeat timeouts (--heartbeat 250ms),
// so the group elects another leader meanwhile.
const faultPause = 3 * time.Second

// The traffic of etcd's robustness scenarios that run on a cluster of
// three (scenarios.go): EtcdTrafficDeleteLeases and KubernetesLowTraffic,
// both at KeyValueMedium's rate (100 to 200 requests a second), with
// etcd's default watches and a compaction every 200 ms. Fewer clients
// than etcd's six a member and two of the cluster, so that the three
// nodes, MinIO and the clients share two cores.
var traffics = []struct {
	name    string
	traffic traffic.Traffic
}{
	{"etcd", traffic.EtcdPutDeleteLease},
	{"kubernetes", traffic.Kubernetes},
}

var profile = traffic.Profile{
	KeyValue: &traffic.KeyValue{
		MinimalQPS: 100, MaximalQPS: 200, BurstableQPS: 1000,
		MemberClientCount: 3, ClusterClientCount: 1, MaxNonUniqueRequestConcurrency: 3,
	},
	Watch:      &traffic.Watch{MemberClientCount: 3, ClusterClientCount: 1, RevisionOffsetRange: traffic.WatchDefault.RevisionOffsetRange},
	Compaction: &traffic.CompactionDefault,
}

// TestRobustness runs etcd's robustness traffic against a three-node
// group while its leader is SIGKILLed and restarted, SIGSTOPped and
// continued, and cut off from its store; then it validates the clients'
// reports against the group's history with etcd's checker, which must
// find every result linearizable, every watch's events those of the
// history in order and every serializable read right for its revision.
func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd's traffic through faults for a minute")
	}
	minio := testutil.MinIO(t)
	minio.SetEnv(t)
	bin := buildTenure(t)
	for i, tf := range traffics {
		t.Run(tf.name, func(t *testing.T) {
			g := startGroup(t, bin, minio, fmt.Sprintf("robustness-%d-%d", time.Now().UnixNano(), i))
			reports := runTraffic(t, g, tf.traffic)
			persisted := readPersisted(t, g)
			lg := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
			res := validate.ValidateAndReturnVisualize(lg, validate.Config{ExpectRevisionUnique: tf.traffic.ExpectUniqueRevision()}, reports, persisted, 5*time.Minute)
			logResult(t, reports, persisted, res)
			if err := res.Error(); err != nil {
				keepFailure(t, lg, g, tf.traffic, reports, persisted, res)
				t.Fatalf("etcd's checker: %v", err)
			}
			for name, r := range map[string]validate.Result{"assumptions": res.Assumptions, "linearization": res.Linearization.Result, "watch": res.Watch, "serializable": res.Serializable} {
				if r.Status != validate.Success {
					t.Errorf("%s: %v, want Success: every check must have run", name, r)
				}
			}
			if t.Failed() {
				return
			}
			// The checker fails a history that is not the group's: the
			// same reports against the log with one write left out.
			wrong := dropWrite(t, reports, persisted)
			refused, why := refuses(reports, wrong, validate.Config{ExpectRevisionUnique: tf.traffic.ExpectUniqueRevision()})
			if !refused {
				t.Fatal("etcd's checker passed the history with a write left out")
			}
			t.Logf("with a write left out of the history: %s", why)
		})
	}
}

// roundsEnv repeats the faults, traffic flowing throughout, for a longer
// run than scripts/test's: TENURE_ROBUSTNESS_ROUNDS=5 runs them five
// times over (about 15 s each).
const roundsEnv = "TENURE_ROBUSTNESS_ROUNDS"

func rounds(t *testing.T) int {
	v := os.Getenv(roundsEnv)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", roundsEnv, v)
	}
	return n
}

// runTraffic runs the traffic while it injects the faults into the
// group's leader, one after the other, and returns the clients' reports,
// their watches' included.
func runTraffic(t *testing.T, g *group, tf traffic.Traffic) []report.ClientReport {
	ctx := t.Context()
	baseTime := time.Now()
	hosts := g.eps
	ids := identity.NewIDProvider()
	trafficSet := client.NewSet(ids, baseTime)
	defer trafficSet.Close()
	lg := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	if err := traffic.CheckEmptyDatabaseAtStart(ctx, lg, hosts, trafficSet); err != nil {
		t.Fatalf("the group is not empty: %v", err)
	}
	finish := make(chan struct{})
	maxRevision := make(chan int64, 1)
	var eg errgroup.Group
	start := time.Since(baseTime)
	eg.Go(func() error {
		defer close(maxRevision)
		simulate(ctx, t, tf, hosts, trafficSet, finish)
		maxRevision <- report.OperationsMaxRevision(trafficSet.Reports())
		return nil
	})
	watchSet := client.NewSet(ids, baseTime)
	defer watchSet.Close()
	eg.Go(func() error {
		return client.CollectClusterWatchEvents(ctx, client.CollectClusterWatchEventsParam{
			Lg: lg, Endpoints: hosts, MaxRevisionChan: maxRevision, ClientSet: watchSet,
		})
	})
	for range rounds(t) {
		injectFaults(g)
	}
	close(finish)
	if err := eg.Wait(); err != nil {
		t.Fatalf("collecting watch events: %v", err)
	}
	reports := slices.Concat(trafficSet.Reports(), watchSet.Reports())
	st := traffic.CalculateStats(reports, start, time.Since(baseTime))
	t.Logf("traffic: %d requests succeeded, %d failed, over %v (%.0f a second)", st.Successes, st.Failures, st.Period.Round(time.Millisecond), st.QPS())
	return reports
}

// simulate runs the key-value, watch and compaction traffic until
// finish is closed, as etcd's robustness test does.
func simulate(ctx context.Context, t *testing.T, tf traffic.Traffic, hosts []string, cs *client.ClientSet, finish <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	limiter := rate.NewLimiter(rate.Limit(profile.KeyValue.MaximalQPS), profile.KeyValue.BurstableQPS)
	keyStore := traffic.NewKeyStore(10, "key")
	storage := traffic.NewKubernetesStorage()
	err := traffic.SimulateKeyValueTraffic(ctx, &wg, profile.KeyValue, hosts, cs, tf, traffic.RunTrafficLoopParam{
		QPSLimiter:                         limiter,
		IDs:                                cs.IdentityProvider(),
		LeaseIDStorage:                     identity.NewLeaseIDStorage(),
		NonUniqueRequestConcurrencyLimiter: traffic.NewConcurrencyLimiter(profile.KeyValue.MaxNonUniqueRequestConcurrency),
		KeyStore:                           keyStore,
		Storage:                            storage,
		Finish:                             finish,
	})
	if err != nil {
		t.Errorf("key-value traffic: %v", err)
		return
	}
	err = traffic.SimulateWatchTraffic(ctx, &wg, profile.Watch, hosts, cs, tf, traffic.RunWatchLoopParam{
		Config: *profile.Watch, QPSLimiter: limiter, KeyStore: keyStore, Storage: storage, Finish: finish,
		Logger: zap.NewNop(),
	})
	if err != nil {
		t.Errorf("watch traffic: %v", err)
		return
	}
	err = traffic.SimulateCompactionTraffic(ctx, &wg, profile.Compaction, hosts, cs, tf, traffic.RunCompactLoopParam{
		Period: profile.Compaction.Period, Finish: finish,
	})
	if err != nil {
		t.Errorf("compaction traffic: %v", err)
	}
}

// injectFaults runs the faults one after the other, with traffic
// flowing between them: the leader SIGKILLed and started again, the
// leader SIGSTOPped and continued, the leader's store black-holed and
// healed. Each time a new leader must take over.
func injectFaults(g *group) {
	t := g.t
	settle := func() { time.Sleep(2 * time.Second) } // traffic with no fault, not a synchronization
	settle()

	l := g.leader()
	g.logf("SIGKILL of the leader n%d", l)
	g.nodes[l].kill()
	g.waitNewLeader(l)
	g.restart(l)
	g.logf("n%d restarted", l)
	settle()

	l = g.leader()
	g.logf("SIGSTOP of the leader n%d", l)
	g.nodes[l].signal(syscall.SIGSTOP)
	time.Sleep(faultPause)
	g.nodes[l].signal(syscall.SIGCONT)
	g.logf("SIGCONT of n%d", l)
	g.waitNewLeader(l)
	settle()

	l = g.leader()
	g.logf("black hole of the leader n%d's store", l)
	g.proxies[l].BlackHole(t)
	time.Sleep(faultPause)
	g.proxies[l].SetUp(t, true)
	g.logf("n%d's store healed", l)
	g.waitNewLeader(l)
	settle()
	if t.Failed() {
		t.FailNow()
	}
}

// readPersisted reads the group's history from the store.
func readPersisted(t *testing.T, g *group) []model.EtcdRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, g.store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	persisted, err := PersistedRequests(ctx, st, groupName)
	if err != nil {
		t.Fatalf("reading the group's history: %v", err)
	}
	return persisted
}

// logResult logs what the checker was given and what it found.
func logResult(t *testing.T, reports []report.ClientReport, persisted []model.EtcdRequest, res validate.RobustnessResult) {
	ops, watches, events := 0, 0, 0
	for _, r := range reports {
		ops += len(r.KeyValue)
		for _, w := range r.Watch {
			watches++
			for _, resp := range w.Responses {
				events += len(resp.Events)
			}
		}
	}
	kinds := map[model.RequestType]int{}
	for _, r := range persisted {
		kinds[r.Type]++
	}
	t.Logf("checked %d key-value operations, %d watches with %d events, against %d persisted requests %v", ops, watches, events, len(persisted), kinds)
	t.Logf("assumptions: %v; linearization: %v; watch: %v; serializable: %v", res.Assumptions, res.Linearization.Result, res.Watch, res.Serializable)
}

// dropWrite returns persisted without the middle one of the writes a
// client saw succeed (a put whose value a successful response
// acknowledged): each made a revision, so leaving one out moves every
// later revision of the history. A write that failed (a Txn whose
// condition did not hold, a put with a lease gone) changes nothing, and
// the checker rightly passes a history without it.
// refuses validates reports against a history that is not the group's
// and reports whether etcd's checker refused it, and why. The checker
// may panic on such a history rather than return an error (a watch event
// at a revision past the history's last: "requested revision ..., higher
// than observed in replay"); that is a refusal too.
func refuses(reports []report.ClientReport, history []model.EtcdRequest, cfg validate.Config) (refused bool, why string) {
	defer func() {
		if p := recover(); p != nil {
			refused, why = true, fmt.Sprintf("the checker panicked: %v", p)
		}
	}()
	res := validate.ValidateAndReturnVisualize(zap.NewNop(), cfg, reports, history, time.Minute)
	if err := res.Error(); err != nil {
		return true, err.Error()
	}
	return false, ""
}

func dropWrite(t *testing.T, reports []report.ClientReport, persisted []model.EtcdRequest) []model.EtcdRequest {
	t.Helper()
	acked := map[model.ValueOrHash]bool{}
	for _, r := range reports {
		for _, op := range r.KeyValue {
			req, resp := op.Input.(model.EtcdRequest), op.Output.(model.MaybeEtcdResponse)
			if req.Type != model.Txn || resp.Error != "" || resp.Txn == nil || resp.Txn.Failure {
				continue
			}
			for _, o := range req.Txn.OperationsOnSuccess {
				if o.Type == model.PutOperation {
					acked[o.Put.Value] = true
				}
			}
		}
	}
	var writes []int
	for i, r := range persisted {
		if r.Type != model.Txn {
			continue
		}
		for _, o := range r.Txn.OperationsOnSuccess {
			if o.Type == model.PutOperation && acked[o.Put.Value] {
				writes = append(writes, i)
				break
			}
		}
	}
	if len(writes) == 0 {
		t.Fatal("no acknowledged write in the history")
	}
	i := writes[len(writes)/2]
	return slices.Delete(slices.Clone(persisted), i, i+1)
}

// keepFailure saves what a failed validation was given, for
// report.LoadClientReports and a second look: the clients' reports, the
// persisted requests, the checker's visualization and each node's
// output, in a directory it names.
func keepFailure(t *testing.T, lg *zap.Logger, g *group, tf traffic.Traffic, reports []report.ClientReport, persisted []model.EtcdRequest, res validate.RobustnessResult) {
	dir, err := os.MkdirTemp("", "tenure-robustness-")
	if err != nil {
		t.Logf("keeping the failed run: %v", err)
		return
	}
	r, err := report.NewTestReport(lg, filepath.Join(dir, "report"), nil, &report.TrafficDetail{ExpectUniqueRevision: tf.ExpectUniqueRevision()})
	if err == nil {
		r.SetClientReports(reports)
		err = r.SaveEtcdData()
	}
	if err != nil {
		t.Logf("saving the clients' reports: %v", err)
	}
	if b, err := json.Marshal(persisted); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "persisted.json"), b, 0o644)
	}
	if m := res.Linearization.Model; m.Step != nil || m.StepContext != nil {
		_ = res.Linearization.Visualize(lg, filepath.Join(dir, "history.html"))
	}
	for i, p := range g.nodes {
		if p != nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i)), []byte(p.output()), 0o644)
		}
	}
	t.Logf("the failed run's reports, history and node logs are in %s", dir)
}
