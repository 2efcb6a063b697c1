package config_test

import (
	"errors"
	"fmt"

	"github.com/limitproxy/limitproxy/policy/config"
)

// A file with three mistakes: Parse reports every one, not only the
// first. Its error is an Errors, each Error at its line and column with
// the key it concerns; printed whole, it is one line an error, as
// `limitproxy check` shows them.
func ExampleParse_errors() {
	const src = `[server]
idle_timeout = "2 minutes"

[[upstream]]
name = "app"
targets = ["127.0.0.1:9000"]

[[policy]]
name = "api"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/x"
`
	_, err := config.Parse("example.toml", []byte(src))
	var errs config.Errors
	if !errors.As(err, &errs) {
		panic(err)
	}
	for _, e := range errs {
		fmt.Printf("line %d, column %d: %s\n", e.Line, e.Col, e.Key)
	}
	fmt.Println(err)
	// Output:
	// line 2, column 1: server.idle_timeout
	// line 6, column 1: upstream[0].targets
	// line 13, column 3: policy[0].limits[0].rate
	// example.toml:2:1: server.idle_timeout: "2 minutes" is not a duration (write e.g. "250ms", "30s", "1m")
	// example.toml:6:1: upstream[0].targets: element 0: "127.0.0.1:9000" is not an http:// or https:// URL with a host
	// example.toml:13:3: policy "api" limits[0].rate: bad rate "10/x": the period after / must be s, m, h, d or a positive duration such as 5m
}
