package rsm_test

import (
	"strings"
	"testing"

	"github.com/tenure-io/tenure/rsm"
)

// A MaxMessageSize the RPC transport cannot carry is refused up front, not
// at the first large command.
func TestMaxMessageSizeLimit(t *testing.T) {
	if err := (rsm.Options{MaxMessageSize: rsm.MaxMessageSizeLimit}).Validate(); err != nil {
		t.Fatalf("MaxMessageSizeLimit refused: %v", err)
	}
	err := (rsm.Options{MaxMessageSize: rsm.MaxMessageSizeLimit + 1}).Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxMessageSize must be at most") {
		t.Fatalf("MaxMessageSizeLimit+1: got %v, want an error naming MaxMessageSize's limit", err)
	}
}
