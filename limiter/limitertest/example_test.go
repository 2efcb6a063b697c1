package limitertest_test

import (
	"testing"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// conformance is what a third store's test file holds, as
// TestConformance(t *testing.T): the suite runs every algorithm's
// decisions against exact models, with fresh stores from newStore, and
// fails the test at the first decision that differs. Here the store is
// the memory store; put yours in its place.
func conformance(t *testing.T) {
	newStore := func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) }
	limitertest.Run(t, newStore)
	limitertest.RunCharge(t, newStore, limitertest.Options{}) // if the store implements driver.Charger
	limitertest.RunLeakyQueue(t, newStore)                    // if it keeps a real queue; else RunLeakyVirtual
}

// How a store proves itself: a test that calls limitertest.Run (see
// conformance above; it needs a *testing.T, so it runs in go test, not
// here).
func Example() {
	_ = conformance
}
