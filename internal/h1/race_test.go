//go:build race

package h1

// raceEnabled: under the race detector the runtime doubles a stack's
// guard, and a goroutine's smallest stack that parks in a read is 4 KiB.
const raceEnabled = true
