package perkey_test

import (
	"fmt"
	"time"

	"github.com/limitproxy/limitproxy/limiter/perkey"
)

// The penalty box's arithmetic, which both stores apply: a first offence
// bans for Duration, an offence during the ban changes nothing, and a new
// ban within Memory of the last one is a level higher (×Factor, at most
// Max).
func ExampleBanParams_Offend() {
	p := perkey.BanParams{Duration: time.Minute, Factor: 4, Max: time.Hour, Memory: 24 * time.Hour}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := perkey.Ban{Policy: "login", Key: "203.0.113.9"}
	for _, at := range []time.Duration{0, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute} {
		b = p.Offend(b, t0.Add(at))
		fmt.Printf("offence at t+%v: level %d, banned for %v\n", at, b.Level, b.Until.Sub(b.Since))
	}
	// Output:
	// offence at t+0s: level 1, banned for 1m0s
	// offence at t+30s: level 1, banned for 1m0s
	// offence at t+2m0s: level 2, banned for 4m0s
	// offence at t+10m0s: level 3, banned for 16m0s
	// offence at t+30m0s: level 4, banned for 1h0m0s
}
