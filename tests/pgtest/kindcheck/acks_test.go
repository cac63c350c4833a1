package kindcheck

import (
	"testing"
	"time"
)

// A failover that lost an acknowledged acquire shows in the clients'
// record: the promoted standby hands the same fence out again, or a lower
// one after the fault.
func TestAcksFindReusedFences(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var a Acks
	a.Add(Ack{Kind: "semaphore", Key: "k#1", Fence: 7, Worker: "w1", Lock: "A", Sent: at(0), Acked: at(10)})
	a.Add(Ack{Kind: "semaphore", Key: "k#2", Fence: 7, Worker: "w2", Lock: "B", Sent: at(0), Acked: at(10)}) // another slot
	cut := Cut{At: at(100), Max: a.MaxBefore(at(100))}
	if vs := a.Check([]Cut{cut}); len(vs) != 0 {
		t.Fatalf("violations on a clean record: %v", vs)
	}
	a.Add(Ack{Kind: "semaphore", Key: "k#1", Fence: 7, Worker: "w3", Lock: "C", Sent: at(200), Acked: at(210)})
	a.Add(Ack{Kind: "semaphore", Key: "k#2", Fence: 6, Worker: "w3", Lock: "D", Sent: at(200), Acked: at(220)})
	a.Add(Ack{Kind: "semaphore", Key: "k#2", Fence: 8, Worker: "w3", Lock: "E", Sent: at(300), Acked: at(320)})
	vs := a.Check([]Cut{cut})
	rules := map[string]int{}
	for _, v := range vs {
		rules[v.Rule]++
	}
	if len(vs) != 2 || rules["semaphore: "+RuleAckTwice] != 1 || rules["semaphore: "+RuleAckAfter] != 1 {
		t.Fatalf("violations %v, want one of each rule", vs)
	}
}
