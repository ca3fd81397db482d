package notify_test

import (
	"io"
	"log/slog"
	"slices"
	"testing"

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
