// Package limitproxy holds what the whole module shares: the example
// configuration, embedded so that `limitproxy demo` runs from anywhere.
package limitproxy

import _ "embed"

// ExampleConfig is config.example.toml.
//
//go:embed config.example.toml
var ExampleConfig []byte
