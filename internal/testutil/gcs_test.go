package testutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestFakeGCS(t *testing.T) {
	srv := FakeGCS(t)
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Errorf("endpoint %q is not on loopback", srv.Endpoint)
	}
	if again := FakeGCS(t); again != srv {
		t.Errorf("second call returned %+v, want the shared %+v", again, srv)
	}
	// The bucket exists, and is listed without credentials.
	resp, err := http.Get(srv.Endpoint + "/storage/v1/b/" + srv.Bucket + "/o")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("list the bucket: %s: %s", resp.Status, body)
	}
	want := "gs://" + srv.Bucket + "/a/b?endpoint=http%3A%2F%2F127.0.0.1%3A"
	if u := srv.URL("/a/b"); !strings.HasPrefix(u, want) {
		t.Errorf("URL = %q, want it to start with %q", u, want)
	}
}
