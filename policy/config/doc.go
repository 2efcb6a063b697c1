// Package config reads limitproxy's TOML configuration file
// (docs/configuration.md, config.example.toml) into a validated,
// immutable Config with every default applied. It holds no live
// objects: package policy compiles a Config into the Set the data path
// reads, and the server opens listeners and stores from it.
//
// Load and LoadWith read a file, Parse and ParseWith a file's bytes;
// Options adds the checks only a caller knows (a store backend's bounds)
// and can ask for a partial Config beside the errors, for `limitproxy
// check`. Input is bounded (MaxFileBytes, MaxDepth), and {$NAME}
// placeholders are expanded in string values as they are decoded (env.go).
//
// Errors carry positions. Decoding goes into unexported raw structs
// (file.go) whose every leaf is a value type of types.go that records its
// own error instead of stopping the decode, so one pass finds every bad
// value; unknown keys are errors too, and checks across fields run after
// decoding (validate.go). Every problem of a file that decodes comes back
// at once as Errors (a TOML syntax error is one, where the decoder
// stopped), each an *Error with the file, the TOML key path and, where
// the key was found in the text, its line and column, in file order:
// "limitproxy.toml:12:9: policy[0].limits[0].rate: ...".
//
// The public API is Config and the types of its fields (Server,
// Upstream, Policy, LimitKey, KeyPart and the rest, and the named string
// types of their modes), the Load and Parse functions with Options, Error
// and Errors, the defaults and bounds a caller reports (Default…, Max…),
// and Watcher, which reports changes to the file for a reload. The raw
// TOML shape and its value types are unexported: config.schema.json, at
// the repository's root, is the file's published shape, generated from
// the raw structs' toml tags by TestSchemaFile (schema_test.go).
package config
