package rsm

import "testing"

// TestRival: a Follow is checked against the registered follower only if
// both carry an incarnation, they differ, and it comes from another
// address (a restart on the same address is the same node).
func TestRival(t *testing.T) {
	l := &leaderRun{w: newWindow(1, Options{}.withDefaults())}
	l.w.register(followerInfo{ID: "f", Addr: "h1:1"})
	l.w.followers["f"].inc = "i1"
	l.w.register(followerInfo{ID: "old", Addr: "h3:1"}) // a version without incarnations
	for _, c := range []struct {
		name string
		fr   followReq
		want bool
	}{
		{"another process elsewhere", followReq{f: followerInfo{ID: "f", Addr: "h2:1"}, inc: "i2"}, true},
		{"the same process again", followReq{f: followerInfo{ID: "f", Addr: "h1:1"}, inc: "i1"}, false},
		{"a restart on the same address", followReq{f: followerInfo{ID: "f", Addr: "h1:1"}, inc: "i2"}, false},
		{"a follower without incarnation", followReq{f: followerInfo{ID: "f", Addr: "h2:1"}}, false},
		{"registered without incarnation", followReq{f: followerInfo{ID: "old", Addr: "h4:1"}, inc: "i3"}, false},
		{"an ID not registered", followReq{f: followerInfo{ID: "g", Addr: "h2:1"}, inc: "i2"}, false},
	} {
		if got := l.rival(c.fr) != nil; got != c.want {
			t.Errorf("%s: rival %v, want %v", c.name, got, c.want)
		}
	}
}
