package limitertest_test

import (
	"testing"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// How a store proves itself: its test file holds a TestConformance that
// runs the suite, which checks every algorithm's decisions against exact
// models with fresh stores from newStore and fails the test at the first
// decision that differs. Here the store is the memory store; put yours in
// its place. (The suite needs a *testing.T, so it runs in go test, not in
// this example.)
func Example() {
	// func TestConformance(t *testing.T) {
	conformance := func(t *testing.T) {
		newStore := func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) }
		limitertest.Run(t, newStore)
		limitertest.RunCharge(t, newStore, limitertest.Options{}) // if the store implements driver.Charger
		limitertest.RunLeakyQueue(t, newStore)                    // if it keeps a real queue; else RunLeakyVirtual
	}
	_ = conformance
}
