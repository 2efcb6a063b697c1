//go:build !race

package proxy

// raceDetector: see race_test.go.
const raceDetector = false
