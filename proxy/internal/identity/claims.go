package identity

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Claims are a verified token's claims, decoded from its payload once.
// The zero value has no claims. Claims are never changed after
// verification, so they are safe for concurrent use, and the same Claims
// may be returned for every request that carries the same token.
type Claims struct {
	m map[string]any // from encoding/json with UseNumber: numbers keep their text
}

// Get returns the claim at path as one string, and whether there is one.
//
// A path names a claim ("sub") or a member of a claim's object, each step
// after a dot ("org.id" is {"org": {"id": …}}). A claim whose own name
// holds dots, as namespaced claims do ("https://example.com/org"), is
// found by its whole name first: at each level the rest of the path is
// tried as one name before it is split at a dot, leftmost first.
//
// A string is returned as it is; a number as its JSON text in the token
// ("42", "1.5e3"; never reformatted, so no precision is lost); a boolean
// as "true" or "false". null, an object and an array give no value: an
// array has no single value to key a limit by, and its first element
// would depend on the order the issuer happens to write (use Values to
// match one of its elements).
func (c Claims) Get(path string) (string, bool) {
	v, ok := lookup(c.m, path)
	if !ok {
		return "", false
	}
	return scalar(v)
}

// Values returns the claim at path as a list of strings: the elements of
// an array whose elements are all strings, numbers or booleans, each
// written as Get writes it, or one value for a claim that is not an
// array. It is what a match "the token's roles include admin" reads. An
// array holding an object, an array or null, and a path that names
// nothing, an object or null, give no values.
func (c Claims) Values(path string) ([]string, bool) {
	v, ok := lookup(c.m, path)
	if !ok {
		return nil, false
	}
	arr, isArr := v.([]any)
	if !isArr {
		s, ok := scalar(v)
		if !ok {
			return nil, false
		}
		return []string{s}, true
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := scalar(e)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// lookup finds path in m: the whole path as one name first, then split at
// each dot, leftmost first, into an object's name and the path within it.
func lookup(m map[string]any, path string) (any, bool) {
	if v, ok := m[path]; ok {
		return v, true
	}
	for i := 0; i < len(path); i++ {
		if path[i] != '.' {
			continue
		}
		if sub, ok := m[path[:i]].(map[string]any); ok {
			if v, ok := lookup(sub, path[i+1:]); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// scalar writes a string, number or boolean as Get returns it.
func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return string(v), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// JSON returns the claim at path (found as Get finds it) as JSON text,
// whatever its type: what [log] access_replay records of a claim that
// policies read, so that a replay sees the same value (FromJSON). false
// when path names nothing.
func (c Claims) JSON(path string) (string, bool) {
	v, ok := lookup(c.m, path)
	if !ok {
		return "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false // not reached: the value came from JSON
	}
	return string(b), true
}

// FromJSON returns Claims holding, at each path of byPath, the value its
// JSON text gives (as JSON wrote it): the claims a replayed request had
// when it was logged. A path is held as one name, which Get and Values
// find first, so "org.id" need not be nested. It fails on text that is
// not JSON.
func FromJSON(byPath map[string]string) (Claims, error) {
	m := make(map[string]any, len(byPath))
	for path, text := range byPath {
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return Claims{}, fmt.Errorf("claim %s: %w", path, err)
		}
		if dec.More() {
			return Claims{}, fmt.Errorf("claim %s: more than one JSON value", path)
		}
		m[path] = v
	}
	return Claims{m: m}, nil
}
