package memstore_test

import (
	"testing"

	"limitproxy/limiter"
	"limitproxy/limiter/limitertest"
	"limitproxy/limiter/memstore"
)

func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) })
}

func TestLeakyQueue(t *testing.T) {
	limitertest.RunLeakyQueue(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) })
}
