// Package policytest holds what tests and benchmarks of several packages
// share about policy sets: the match rules of a large set that mixes
// every kind.
package policytest

import "fmt"

// MixedMatch returns the contents of the match table (without its braces)
// of the i-th policy (from 0) of a set that mixes every kind of match
// rule, in turn by i mod 7: exact path, path prefix, anchored regex, exact
// hosts, wildcard host with methods, regex with a literal suffix, path
// prefix with a method. Every i gives rules of its own (its number in the
// path or host), so no two policies of the set match alike. It is a pure
// function, safe for concurrent use.
func MixedMatch(i int) string {
	switch i % 7 {
	case 0:
		return fmt.Sprintf(`path = "/p%d/items"`, i)
	case 1:
		return fmt.Sprintf(`path_prefix = "/pre%d/"`, i)
	case 2:
		return fmt.Sprintf(`path_regex = "^/re%d/[0-9]+$"`, i)
	case 3:
		return fmt.Sprintf(`hosts = ["h%d.example", "h%d.example.net"]`, i, i)
	case 4:
		return fmt.Sprintf(`hosts = ["*.w%d.example"], methods = ["GET", "POST"]`, i)
	case 5:
		return fmt.Sprintf(`path_regex = "/x%d/[a-z]+\\.json$"`, i)
	default:
		return fmt.Sprintf(`path_prefix = "/api/v%d/", methods = ["POST"]`, i)
	}
}
