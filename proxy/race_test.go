//go:build race

package proxy

// raceDetector is whether the tests run under the race detector, which
// slows a request through the proxy by two orders of magnitude: tests
// of many exchanges then run a sample of them.
const raceDetector = true
