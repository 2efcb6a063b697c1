package memstore_test

import (
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/limitertest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) })
}

func TestLeakyQueue(t *testing.T) {
	limitertest.RunLeakyQueue(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{}) })
}

// TestLeakyQueueClock: the same with the clock the tests' instants come
// from (the bubble's), as limitproxy runs it: releases kept on schedule.
func TestLeakyQueueClock(t *testing.T) {
	limitertest.RunLeakyQueue(t, func(t *testing.T) limiter.Store { return memstore.New(memstore.Options{Clock: time.Now}) })
}
