package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
)

// TestLockURLReachesTheLibrarysObject: on every driver, the lock URL that
// the CLI takes and the (StoreURL, LockfilePath) that the library takes
// name the same object. A record written through one is read through the
// other, for a key with a "/" in it (named with "//") and a plain one.
func TestLockURLReachesTheLibrarysObject(t *testing.T) {
	seq := time.Now().UnixNano()
	prefix := func(kind string) string { return fmt.Sprintf("lockurl-%s-%d", kind, seq) }
	drivers := []struct {
		name     string
		storeURL func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file://" + t.TempDir() + "/data" }},
		{"s3", func(t *testing.T) string {
			srv := testutil.MinIO(t)
			srv.SetEnv(t)
			return srv.URL(prefix("s3"))
		}},
		{"gs", func(t *testing.T) string { return testutil.FakeGCS(t).URL(prefix("gs")) }},
		{"azblob", func(t *testing.T) string {
			srv := testutil.Azurite(t)
			srv.SetEnv(t)
			return srv.URL(prefix("az"))
		}},
		{"dynamodb", func(t *testing.T) string {
			srv := testutil.Moto(t)
			srv.SetEnv(t)
			q := url.Values{"endpoint": {srv.Endpoint}, "region": {srv.Region}, "create": {"true"}}
			return "dynamodb://tenure-lockurl/" + prefix("ddb") + "?" + q.Encode()
		}},
		{"route53", func(t *testing.T) string {
			srv := testutil.Moto(t)
			srv.SetEnv(t)
			client := route53.New(route53.Options{
				Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint),
				Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
			})
			out, err := client.CreateHostedZone(t.Context(), &route53.CreateHostedZoneInput{
				Name: aws.String("lockurl.example."), CallerReference: aws.String(prefix("r53")),
			})
			if err != nil {
				t.Fatalf("create hosted zone: %v", err)
			}
			zone := strings.TrimPrefix(aws.ToString(out.HostedZone.Id), "/hostedzone/")
			q := url.Values{"endpoint": {srv.Endpoint}, "rate": {"50"}}
			return "route53://" + zone + "/tenure?" + q.Encode()
		}},
		{"etcd", func(t *testing.T) string { return testutil.Etcd(t).URL(prefix("etcd")) }},
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			storeURL := d.storeURL(t)
			for i, key := range []string{"examples/leader.json", "leader.json"} {
				lockURL, err := store.JoinKeyURL(storeURL, key)
				if err != nil {
					t.Fatal(err)
				}
				checkLockURL(t, storeURL, key, lockURL, fmt.Sprintf("lib-%d", i), fmt.Sprintf("cli-%d", i))
			}
		})
	}
}

// checkLockURL writes a record as the library would, reads it with tenure
// status, then writes one through the store and key that --lock resolves
// to and reads it as the library would.
func checkLockURL(t *testing.T, storeURL, key, lockURL, libID, cliID string) {
	t.Helper()
	ctx := t.Context()
	lib, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	rec := election.Record{LeaderID: libID, Term: 7, LeaseMillis: 15000, LastUpdated: time.Now()}
	version, err := lib.Put(ctx, key, rec.Encode(), store.IfAbsent())
	if err != nil {
		t.Fatalf("the library's write of %q: %v", key, err)
	}
	code, out, errs := runCmd(t, "status", lockURL, "--json")
	var got struct {
		Exists bool            `json:"exists"`
		Record election.Record `json:"record"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Exists || got.Record.LeaderID != libID {
		t.Fatalf("tenure status %s after the library wrote %q in %s: exit %d\n%s%s", lockURL, key, storeURL, code, out, errs)
	}

	// The CLI's side: the store and key that --lock resolves to.
	fs := newFlags(&env{stdout: &strings.Builder{}, stderr: &strings.Builder{}}, "t", "t")
	ef := addElectFlags(fs)
	if err := fs.Parse(append([]string{"--lock", lockURL}, fastFlags...)); err != nil {
		t.Fatal(err)
	}
	cfg, cliURL, err := ef.config(&env{stdout: &strings.Builder{}, stderr: &strings.Builder{}})
	if err != nil {
		t.Fatalf("--lock %s: %v", lockURL, err)
	}
	cli, err := store.Open(ctx, cliURL)
	if err != nil {
		t.Fatalf("--lock %s: %v", lockURL, err)
	}
	defer cli.Close()
	cfg.Store = cli
	rec.LeaderID, rec.Term = cliID, 8
	if _, err := cfg.Store.Put(ctx, cfg.LockfilePath, rec.Encode(), store.IfMatch(version)); err != nil {
		t.Fatalf("--lock %s: writing the key %q the library wrote in %s: %v", lockURL, cfg.LockfilePath, storeURL, err)
	}
	data, _, err := lib.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := election.DecodeRecord(data); err != nil || r.LeaderID != cliID || r.Term != 8 {
		t.Fatalf("the library reads %+v, %v at %q in %s; want what --lock %s wrote", r, err, key, storeURL, lockURL)
	}
}

// TestStatusSeesTheExampleProgramsLock: the reported case, end to end. A
// member configured as examples/leader-election is (StoreURL file://DIR,
// LockfilePath examples/leader.json) leads; tenure status and tenure elect
// name that lock as file://DIR//examples/leader.json and see it held, and
// a tenure elect there does not lead beside it.
func TestStatusSeesTheExampleProgramsLock(t *testing.T) {
	dir := t.TempDir()
	storeURL := "file://" + dir
	leading := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	el, err := election.New(ctx, election.Config{
		StoreURL: storeURL, LockfilePath: "examples/leader.json", ServerID: "example",
		FrequentInterval: 100 * time.Millisecond, InfrequentInterval: 500 * time.Millisecond,
		LeaderTimeout: 5 * time.Second, RenewDeadline: 4 * time.Second, PeerTimeout: time.Second,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnStartedLeading: func(ctx context.Context) { close(leading); <-ctx.Done() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := el.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = el.Stop(context.Background()) }()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		t.Fatal("the library member did not lead")
	}
	lock := storeURL + "//examples/leader.json"
	code, out, errs := runCmd(t, "status", lock)
	if code != 0 || !strings.Contains(out, "leader   example") || !strings.Contains(out, "state    held") {
		t.Fatalf("tenure status %s while the library leads: exit %d\n%s%s", lock, code, out, errs)
	}
	// The last segment alone is the key leader.json in the store
	// file://DIR/examples, a directory that does not exist: status, which
	// opens the store read-only, creates nothing and says so.
	code, out, errs = runCmd(t, "status", storeURL+"/examples/leader.json")
	if code != 1 || !strings.Contains(errs, filepath.Join(dir, "examples")+" does not exist") {
		t.Fatalf("tenure status of the last segment: exit %d\n%s%s", code, out, errs)
	}

	// A CLI member on the same lock follows: it sees the library's leader.
	ectx, ecancel := context.WithCancel(t.Context())
	errb := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		args := []string{"elect", "--lock", lock, "--id", "cli", "--http", "", "--log-level", "info",
			"--frequent", "100ms", "--infrequent", "500ms", "--leader-timeout", "5s", "--renew-deadline", "4s", "--peer-timeout", "1s"}
		done <- run(ectx, &env{stdout: &lockedBuffer{}, stderr: errb}, args)
	}()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !strings.Contains(errb.String(), "leaderID=example"); time.Sleep(20 * time.Millisecond) {
	}
	ecancel()
	if code := <-done; code != 0 {
		t.Fatalf("tenure elect exited %d:\n%s", code, errb.String())
	}
	if s := errb.String(); !strings.Contains(s, "leaderID=example") || strings.Contains(s, "leaderID=cli") {
		t.Fatalf("tenure elect --lock %s did not follow the library's leader:\n%s", lock, s)
	}
	if !el.IsLeader() {
		t.Fatal("the library member lost leadership to the CLI member")
	}
}
