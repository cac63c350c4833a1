package chaos

import "testing"

func TestResourceRejectsStaleFences(t *testing.T) {
	r := resource{last: map[string]int64{}}
	if !r.write("k", 3, false) || !r.write("k", 3, false) || r.write("k", 2, true) || !r.write("k", 4, false) {
		t.Fatal("fenced resource accepted a stale write or rejected a current one")
	}
	if r.st.Accepted != 3 || r.st.ZombieRejected != 1 {
		t.Fatalf("%+v", r.st)
	}
}
