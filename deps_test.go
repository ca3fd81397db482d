package tenure_test

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists the packages a build of pkgs links, with the go tool.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// The binary stays lean: no Apache Arrow (azblob v1.8.1 and later import it).
func TestBinaryDoesNotLinkArrow(t *testing.T) {
	for _, p := range deps(t, "./cmd/tenure") {
		if strings.HasPrefix(p, "github.com/apache/arrow") {
			t.Fatalf("cmd/tenure links %s; keep azblob at v1.8.0 (go.mod) or find what pulls it in", p)
		}
	}
}

// gcsstore speaks the JSON API through google.golang.org/api/storage/v1: the
// Cloud Storage client library links gRPC's xDS, Envoy's protobufs, CEL and
// the OpenTelemetry SDK and exporters, and initialises them at start (tenure
// 82.8 MB with it, 57.1 MB without; docs/BENCHMARKS.md, Binary weight).
func TestBinaryDoesNotLinkTheCloudStorageLibrary(t *testing.T) {
	heavy := []string{
		"cloud.google.com/go/storage", "google.golang.org/grpc/xds", "github.com/envoyproxy/",
		"cel.dev/", "go.opentelemetry.io/otel/sdk", "cloud.google.com/go/monitoring",
	}
	for _, p := range deps(t, "./cmd/tenure") {
		for _, h := range heavy {
			if strings.HasPrefix(p, h) {
				t.Errorf("cmd/tenure links %s; see docs/BENCHMARKS.md, Binary weight", p)
			}
		}
	}
}

// A program that imports election, lease or the file and memory drivers
// builds none of the cloud SDKs, gRPC or the test-only modules.
func TestCorePackagesStayLight(t *testing.T) {
	heavy := []string{
		"github.com/aws/", "github.com/Azure/", "cloud.google.com/", "google.golang.org/grpc",
		"go.etcd.io/", "github.com/anishathalye/porcupine", "github.com/apache/",
	}
	for _, p := range deps(t, "./election", "./lease", "./store/filestore", "./store/memstore") {
		for _, h := range heavy {
			if strings.HasPrefix(p, h) {
				t.Errorf("the core packages link %s", p)
			}
		}
	}
}

// Beyond the standard library, the core packages link only the Prometheus
// client (their optional Registerer) and what it needs. It costs a program
// that imports election about 4 MB; anything else that creeps in fails here.
func TestCorePackagesLinkOnlyThePrometheusClient(t *testing.T) {
	allowed := []string{
		"github.com/tenure-io/tenure/",
		"github.com/prometheus/client_golang/", "github.com/prometheus/client_model/",
		"github.com/prometheus/common/", "github.com/prometheus/procfs",
		"github.com/beorn7/perks/", "github.com/cespare/xxhash/", "github.com/munnerz/goautoneg",
		"google.golang.org/protobuf/", "golang.org/x/sys/",
	}
	for _, p := range deps(t, "./election", "./lease", "./store/filestore", "./store/memstore") {
		first, _, _ := strings.Cut(p, "/")
		if !strings.Contains(first, ".") {
			continue // the standard library
		}
		ok := false
		for _, a := range allowed {
			ok = ok || strings.HasPrefix(p, a)
		}
		if !ok {
			t.Errorf("the core packages link %s", p)
		}
	}
}

// A kv or etcd server links rsm and what it serves operators
// (internal/opsserver), not the election and lease packages: their views
// are their commands' (cmd/tenure).
func TestKVServerDoesNotLinkElectionOrLease(t *testing.T) {
	for _, p := range deps(t, "./rsm/kv/kvserver", "./internal/opsserver") {
		if p == "github.com/tenure-io/tenure/election" || p == "github.com/tenure-io/tenure/lease" ||
			strings.HasPrefix(p, "github.com/tenure-io/tenure/election/") || strings.HasPrefix(p, "github.com/tenure-io/tenure/lease/") {
			t.Errorf("rsm/kv/kvserver links %s", p)
		}
	}
}
