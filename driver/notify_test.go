package driver_test

import (
	"fmt"
	"testing"

	"github.com/syncguard/syncguard-go/driver"
)

func TestNotifyQueueKeepsChannelsInOrderAndBounded(t *testing.T) {
	var q driver.NotifyQueue
	if _, ok := q.Pop(); ok {
		t.Fatal("rule: the zero queue is empty")
	}
	q.Push(driver.Notification{Channel: "a", Payload: "1"})
	q.Push(driver.Notification{Channel: "b", Payload: "1"})
	select {
	case <-q.Ready():
	default:
		t.Error("rule: Ready is signalled after a Push")
	}
	for _, want := range []driver.Notification{{Channel: "a", Payload: "1"}, {Channel: "b", Payload: "1"}} {
		if n, ok := q.Pop(); !ok || n != want {
			t.Errorf("rule: notifications come out in order, each with its channel; got %+v, %v, want %+v", n, ok, want)
		}
	}
	// A flood: only the newest NotifyQueueMax are kept.
	const flood = 3*driver.NotifyQueueMax + 7
	for i := range flood {
		q.Push(driver.Notification{Channel: fmt.Sprint("c", i%3), Payload: fmt.Sprint(i)})
	}
	for i := flood - driver.NotifyQueueMax; i < flood; i++ {
		n, ok := q.Pop()
		if want := (driver.Notification{Channel: fmt.Sprint("c", i%3), Payload: fmt.Sprint(i)}); !ok || n != want {
			t.Fatalf("rule: past NotifyQueueMax the oldest are dropped, the rest kept in order; got %+v, %v, want %+v", n, ok, want)
		}
	}
	if n, ok := q.Pop(); ok {
		t.Errorf("rule: at most NotifyQueueMax notifications are kept; one more: %+v", n)
	}
}
