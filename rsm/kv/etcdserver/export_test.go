package etcdserver

// SetFragmentBytes sets the size above which s splits a fragmenting
// watch's responses.
func SetFragmentBytes(s *Server, n int) { s.fragment = n }

// ToGRPC is toGRPC, for its table test.
var ToGRPC = toGRPC
