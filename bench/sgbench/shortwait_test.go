package sgbench

import (
	"testing"
	"time"
)

// TestLongestGap: w44's longest time without a holder, on holdings given
// out of order, overlapping on the client's clock, and none.
func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name     string
		holdings []swHolding
		want     time.Duration
		where    string
		between  time.Duration
	}{
		{"none", nil, 5000 * time.Millisecond, "no holding", 0},
		{"last to end", []swHolding{{at(900), at(901)}, {at(950), at(951)}}, 4049 * time.Millisecond, "last to end", 49 * time.Millisecond},
		{"between, unsorted", []swHolding{{at(3000), at(3001)}, {at(10), at(11)}, {at(4990), at(4991)}}, 2989 * time.Millisecond, "between holdings", 2989 * time.Millisecond},
		{"overlap on the client's clock", []swHolding{{at(100), at(2000)}, {at(1500), at(1501)}, {at(2100), at(4999)}}, 100 * time.Millisecond, "start to first", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &swPhase{holdings: tc.holdings, start: t0, end: at(5000)}
			got, where, between := longestGap(p)
			if got != tc.want || where != tc.where || between != tc.between {
				t.Errorf("got %v %q %v, want %v %q %v", got, where, between, tc.want, tc.where, tc.between)
			}
		})
	}
}
