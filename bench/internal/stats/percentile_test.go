package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"p50 of 1..100", Percentile(hundred, 0.5), 50},
		{"p99 of 1..100", Percentile(hundred, 0.99), 99},
		{"p99.9 of 1..100 is the maximum", Percentile(hundred, 0.999), 100},
		{"p100", Percentile(hundred, 1), 100},
		{"a tiny p is the minimum", Percentile(hundred, 0.001), 1},
		{"one value", Percentile([]float64{7}, 0.999), 7},
		{"p50 of an even count is the lower middle", Percentile([]float64{1, 2, 3, 4}, 0.5), 2},
		{"p99.9 of 1..1000 µs", float64(Percentile(thousand, 0.999) / time.Microsecond), 999},
		{"p99 of 1..1000 µs", float64(Percentile(thousand, 0.99) / time.Microsecond), 990},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}
