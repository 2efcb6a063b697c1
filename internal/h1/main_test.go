package h1

import (
	"flag"
	"os"
	"testing"
)

// shed runs every test with shedAfter as given: -h1.shed=1ns sheds every
// wait for a request at once, parking the connection (or, on one that
// does not offer its socket, moving it to a new goroutine), so that the
// differential and deadline tests go through those paths too.
var shed = flag.Duration("h1.shed", 0, "shedAfter for every test (0: the default)")

func TestMain(m *testing.M) {
	flag.Parse()
	if *shed > 0 {
		shedAfter = *shed
	}
	os.Exit(m.Run())
}
