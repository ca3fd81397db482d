package notify_test

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/internal/notify"
)

func TestQueueRunsInOrderAndSurvivesPanics(t *testing.T) {
	q := notify.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var got []int
	for i := 0; i < 100; i++ {
		if i == 50 {
			q.Add(func() { panic("boom") })
		}
		q.Add(func() { got = append(got, i) })
	}
	q.Close()
	q.Close()
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ran %v", got)
	}
	if r := notify.Safely(func() { panic(7) }); r != 7 {
		t.Fatalf("Safely = %v", r)
	}
}

func TestCloseWithinDoesNotWaitForABlockedCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := notify.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		release := make(chan struct{})
		var ran []int
		q.Add(func() { ran = append(ran, 1) })
		q.Add(func() { <-release })
		q.Add(func() { ran = append(ran, 3) })
		if q.CloseWithin(time.After(time.Second)) {
			t.Fatal("CloseWithin reported a clean close while a callback blocked")
		}
		close(release)
		synctest.Wait()
		if !slices.Equal(ran, []int{1}) {
			t.Fatalf("ran %v; want the callbacks before the blocked one only", ran)
		}
		q2 := notify.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		q2.Add(func() { ran = append(ran, 4) })
		if !q2.CloseWithin(time.After(time.Second)) || !slices.Equal(ran, []int{1, 4}) {
			t.Fatalf("a quick queue: ran %v", ran)
		}
	})
}
