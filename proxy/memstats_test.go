package proxy

import "runtime"

// runtimeMemStats reads the bytes allocated so far.
type runtimeMemStats struct{ bytes uint64 }

func (m *runtimeMemStats) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.bytes = s.TotalAlloc
}
