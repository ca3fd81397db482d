package recordkind

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
		ok               bool // Check(data, want) is nil
		found            string
	}{
		{"declared, same", `{"kind":"tenure.lock","leaderID":"a"}`, Lock, true, ""},
		{"declared, other", `{"kind":"tenure.lease.member","ownerID":"a"}`, Lock, false, `of kind "tenure.lease.member"`},
		{"declared, unknown", `{"kind":"x.y","leaderID":"a"}`, Lock, false, `of kind "x.y", which this version does not know`},
		{"declared, empty", `{"kind":"","leaderID":"a"}`, Lock, false, `of kind ""`},
		{"legacy lock", `{"leaderID":"a","term":2}`, Lock, true, ""},
		{"legacy leader state as a lock", `{"leaderID":"a","term":2,"checksum":"x"}`, Lock, false, `with the field "checksum"`},
		{"legacy leader state", `{"leaderID":"a","term":2,"followers":[]}`, RSMLeaderState, true, ""},
		{"legacy lock as a leader state", `{"leaderID":"a","term":2}`, RSMLeaderState, false, `with the field "leaderID" of an election lock record`},
		{"legacy member", `{"ownerID":"a","session":"s"}`, LeaseMember, true, ""},
		{"legacy assignment as a member", `{"epoch":1,"shards":{}}`, LeaseMember, false, `with the field "epoch"`},
		{"no distinguishing field", `{"x":1}`, LeaseAssignment, true, ""},
		{"not JSON: left to the decoder", `garbage`, Lock, true, ""},
		{"kind not a string: left to the decoder", `{"kind":1}`, Lock, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.data), tc.want)
			if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.found) {
				t.Fatalf("Check(%s, %s) = %v; want ok=%v, saying %q", tc.data, tc.want, err, tc.ok, tc.found)
			}
		})
	}
}

func TestRequire(t *testing.T) {
	for data, want := range map[string]string{
		`{"kind":"tenure.lease.assignment","epoch":1}`: "",
		`{"epoch":1,"shards":{}}`:                      "",
		`{}`:                                           "without a kind field or the fields of a shard-lease assignment record",
		`{"hello":1}`:                                  "without a kind field or the fields of a shard-lease assignment record",
		`{"leaderID":"a","epoch":1}`:                   `with the field "leaderID"`,
		`{"kind":"tenure.lock","epoch":1}`:             `of kind "tenure.lock"`,
	} {
		err := Require([]byte(data), LeaseAssignment)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("Require(%s) = %v; want %q", data, err, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for data, want := range map[string]string{
		`{"kind":"tenure.lock"}`: `it is a record of kind "tenure.lock" (an election lock record)`,
		`{"leaderID":"a"}`:       `it is a record without a kind field, with the field "leaderID" of an election lock record (tenure.lock)`,
		`{"a":1}`:                "it is a JSON object without a kind field",
		"\x00\x01":               "",
		`  {"ownerID":"o"}`:      `it is a record without a kind field, with the field "ownerID" of a shard-lease member record (tenure.lease.member)`,
	} {
		if got := Describe([]byte(data)); got != want {
			t.Errorf("Describe(%q) = %q; want %q", data, got, want)
		}
	}
}
