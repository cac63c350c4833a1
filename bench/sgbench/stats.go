package sgbench

import (
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// Lat is a latency distribution summary in microseconds.
type Lat struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
}

// Summarize sorts d in place and summarizes it.
func Summarize(d []time.Duration) Lat {
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 }
	return Lat{N: len(d), P50: us(Percentile(d, 0.50)), P99: us(Percentile(d, 0.99))}
}
