//go:build !linux

package h1

// parker parks connections on Linux only (park_linux.go): elsewhere a
// wait that outlasts shedAfter goes on in a new goroutine.
type parker struct{}

// parks says that connections park here: not on this system.
const parks = false

func (s *Server) parked() int     { return 0 }
func (s *Server) park(*conn) bool { return false }
func (s *Server) wake(*conn)      {}
func (s *Server) stopParker()     {}
