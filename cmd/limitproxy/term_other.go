//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device: a terminal, or
// another such device (/dev/null), which then gets the progress too.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
