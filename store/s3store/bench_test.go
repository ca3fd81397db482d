package s3store_test

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// Round-trip latency of the calls tenure makes most, on a loopback server:
//
//	go test -bench . -run '^$' ./store/s3store/
//
// A record is about the size of an election lock record, with a fresh nonce
// in every write as tenure writes them.
func BenchmarkS3(b *testing.B) {
	for _, server := range servers {
		b.Run(server.name, func(b *testing.B) {
			srv := server.start(b)
			open := openOn(srv)

			b.Run("Get", func(b *testing.B) {
				s := open(b)
				defer s.Close()
				if _, err := s.Put(b.Context(), "lock", record(0), store.IfAbsent()); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, _, err := s.Get(b.Context(), "lock"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("CreateIfAbsent", func(b *testing.B) {
				s := open(b)
				defer s.Close()
				i := 0
				for b.Loop() {
					i++
					if _, err := s.Put(b.Context(), fmt.Sprintf("log/%020d", i), record(i), store.IfAbsent()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("CompareAndSwap", func(b *testing.B) {
				s := open(b)
				defer s.Close()
				v, err := s.Put(b.Context(), "lock", record(0), store.IfAbsent())
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					i++
					if v, err = s.Put(b.Context(), "lock", record(i), store.IfMatch(v)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func record(term int) []byte {
	return fmt.Appendf(nil, `{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2026-11-21T10:30:45Z",`+
		`"term":%d,"leaseMillis":15000,"session":"5f1c","nonce":%q,"released":false}`, term, rand.Text())
}
