package proxy

import (
	"flag"
	"os"
	"runtime"
	"testing"
)

// TestMain runs up to 8 parallel tests at once unless -test.parallel is
// given: the default, GOMAXPROCS (2 on a small machine), queues tests that
// mostly wait (on a timeout, a slow client, an upstream's delay) behind
// one another.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < 8 {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
