// Package envoyimport converts envoyproxy/ratelimit's YAML configuration
// (one domain per file, a tree of descriptors with rate limits) into
// limitproxy's TOML, for the RLS face. It refuses what envoyproxy/ratelimit
// refuses, with the same checks, and says in the output what it cannot
// carry over rather than changing a decision silently.
//
// The checks follow envoyproxy/ratelimit's src/config/config_impl.go: keys
// outside its known set, non-string keys, lists of anything but maps, an
// empty domain or key, a duplicate key/value at one level, an unknown unit,
// a unit beside unlimited, an empty or self replaces entry, share_threshold
// on a value without '*'.
package envoyimport

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Units maps envoyproxy/ratelimit's units (case-insensitive in its YAML)
// to the length of their window in seconds, as its UnitToDivider does:
// a month is 30 days and a year 365 days, and every window is aligned to
// the Unix epoch (a week starts on a Thursday, 00:00 UTC).
var Units = map[string]int64{
	"second": 1,
	"minute": 60,
	"hour":   3600,
	"day":    86400,
	"week":   7 * 86400,
	"month":  30 * 86400,
	"year":   365 * 86400,
}

// Domain is one YAML file: a domain and its descriptor tree.
type Domain struct {
	File  string
	Name  string
	Nodes []*Node
	Line  int // of the domain key, for messages
}

// Node is one descriptor of the tree.
type Node struct {
	Key, Value     string
	Limit          *Limit // nil: a descriptor without rate_limit
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	ShareThreshold bool
	Metadata       bool // has a metadata map (sent to Envoy by newer versions)
	Children       []*Node
	Line, Col      int
}

// FinalKey is the name envoyproxy/ratelimit files the descriptor under at
// its level: "key" or "key_value".
func (n *Node) FinalKey() string {
	if n.Value == "" {
		return n.Key
	}
	return n.Key + "_" + n.Value
}

// Limit is a descriptor's rate_limit.
type Limit struct {
	RequestsPerUnit uint32
	Unit            string // lower case; "" when Unlimited
	Unlimited       bool
	Name            string
	Replaces        []string
}

// Error is one refusal, at a position of a YAML file when known.
type Error struct {
	File      string
	Line, Col int
	Msg       string
}

func (e Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// Errors is every refusal of an import.
type Errors []Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// validKeys is envoyproxy/ratelimit's set of keys, valid at any level of
// its YAML (it checks names, not places, and ignores a known key in the
// wrong place).
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true, "metadata": true,
}

// parser holds one file's refusals and notes.
type parser struct {
	file     string
	errs     Errors
	warnings []Warning
}

// Warning is something accepted that the output notes as a comment.
type Warning struct {
	File      string
	Line, Col int
	Msg       string
}

func (w Warning) String() string {
	if w.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", w.File, w.Line, w.Col, w.Msg)
	}
	return w.File + ": " + w.Msg
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	e := Error{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) warnf(n *yaml.Node, format string, args ...any) {
	w := Warning{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		w.Line, w.Col = n.Line, n.Column
	}
	p.warnings = append(p.warnings, w)
}

// Parse reads one envoyproxy/ratelimit YAML file. name is used in
// messages. It returns every refusal of the file as Errors.
func Parse(name string, src []byte) (*Domain, []Warning, error) {
	p := &parser{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, Errors{{File: name, Msg: "error loading config file: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	d := &Domain{File: name}
	var descs *yaml.Node
	if len(doc.Content) == 0 {
		p.errorf(nil, "config file cannot have empty domain")
		return nil, nil, p.errs
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "error loading config file: the document is not a map")
		return nil, nil, p.errs
	}
	p.checkKeys(root)
	if len(p.errs) > 0 {
		return nil, nil, p.errs
	}
	for k, v := range pairs(root) {
		switch k.Value {
		case "domain":
			d.Name = p.str(v)
			d.Line = k.Line
		case "descriptors":
			descs = v
		case "metadata":
			p.warnf(k, "domain-level metadata is ignored, as envoyproxy/ratelimit ignores it")
		default:
			p.warnf(k, "%q at the top level is ignored, as envoyproxy/ratelimit ignores it", k.Value)
		}
	}
	if descs != nil {
		d.Nodes = p.descriptors(d.Name+".", descs)
	}
	if d.Name == "" && len(p.errs) == 0 {
		p.errorf(nil, "config file cannot have empty domain")
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b Error) int { return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col)) })
		return nil, nil, p.errs
	}
	return d, p.warnings, nil
}

// pairs yields a mapping node's key and value nodes.
func pairs(m *yaml.Node) func(func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !yield(m.Content[i], m.Content[i+1]) {
				return
			}
		}
	}
}

// checkKeys applies envoyproxy/ratelimit's validateYamlKeys: every key a
// string of its known set, every list a list of maps, every leaf a string,
// an integer, a boolean or null. metadata's contents are free.
func (p *parser) checkKeys(m *yaml.Node) {
	for k, v := range pairs(m) {
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			p.errorf(k, "config error, key is not of type string: %s", k.Value)
			continue
		}
		if !validKeys[k.Value] {
			p.errorf(k, "config error, unknown key '%s'", k.Value)
			continue
		}
		if k.Value == "metadata" {
			continue
		}
		p.checkValue(v)
	}
}

func (p *parser) checkValue(v *yaml.Node) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if e.Kind == yaml.AliasNode {
				e = e.Alias
			}
			if e.Kind != yaml.MappingNode {
				p.errorf(e, "config error, yaml file contains list of type other than map: %s", e.Value)
				continue
			}
			p.checkKeys(e)
		}
	case yaml.MappingNode:
		p.checkKeys(v)
	case yaml.ScalarNode:
		switch v.Tag {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			p.errorf(v, "error checking config: %s is a %s, not a string, integer or boolean", v.Value, strings.TrimPrefix(v.Tag, "!!"))
		}
	}
}

// str decodes a scalar as a string, as yaml.v2 does for a string field
// (null is "").
func (p *parser) str(v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode {
		p.errorf(v, "error loading config file: expected a string")
		return ""
	}
	if v.Tag == "!!null" {
		return ""
	}
	return v.Value
}

func (p *parser) boolean(v *yaml.Node) bool {
	var b bool
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return false
	}
	if err := v.Decode(&b); err != nil {
		p.errorf(v, "error loading config file: %q is not a boolean", v.Value)
	}
	return b
}

// descriptors reads a list of descriptors below parent, the full key of
// the level ("domain." or "domain.key_value.").
func (p *parser) descriptors(parent string, v *yaml.Node) []*Node {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, "error loading config file: descriptors must be a list")
		return nil
	}
	var nodes []*Node
	seen := map[string]*Node{}
	for _, e := range v.Content {
		if e.Kind == yaml.AliasNode {
			e = e.Alias
		}
		n := p.descriptor(parent, e)
		if n == nil {
			continue
		}
		if n.Key == "" {
			p.errorf(e, "descriptor has empty key")
			continue
		}
		fk := n.FinalKey()
		if first, dup := seen[fk]; dup {
			p.errorf(e, "duplicate descriptor composite key '%s%s' (first at line %d)", parent, fk, first.Line)
			continue
		}
		seen[fk] = n
		nodes = append(nodes, n)
	}
	return nodes
}

func (p *parser) descriptor(parent string, m *yaml.Node) *Node {
	n := &Node{Line: m.Line, Col: m.Column}
	var limitNode, children *yaml.Node
	for k, v := range pairs(m) {
		switch k.Value {
		case "key":
			n.Key = p.str(v)
		case "value":
			n.Value = p.str(v)
		case "rate_limit":
			limitNode = v
		case "descriptors":
			children = v
		case "shadow_mode":
			n.ShadowMode = p.boolean(v)
		case "quota_mode":
			n.QuotaMode = p.boolean(v)
		case "detailed_metric":
			n.DetailedMetric = p.boolean(v)
		case "value_to_metric":
			n.ValueToMetric = p.boolean(v)
		case "share_threshold":
			n.ShareThreshold = p.boolean(v)
		case "metadata":
			n.Metadata = v.Kind == yaml.MappingNode && len(v.Content) > 0
			if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
				p.errorf(v, "error parsing metadata: not a map")
			}
		default:
			p.warnf(k, "%q in a descriptor is ignored, as envoyproxy/ratelimit ignores it", k.Value)
		}
	}
	if limitNode != nil && !(limitNode.Kind == yaml.ScalarNode && limitNode.Tag == "!!null") {
		n.Limit = p.limit(limitNode)
	}
	if children != nil {
		n.Children = p.descriptors(parent+n.FinalKey()+".", children)
	}
	if n.ShareThreshold && !strings.Contains(n.FinalKey(), "*") {
		p.errorf(m, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", n.FinalKey())
	}
	return n
}

func (p *parser) limit(m *yaml.Node) *Limit {
	if m.Kind != yaml.MappingNode {
		p.errorf(m, "error loading config file: rate_limit must be a map")
		return nil
	}
	l := &Limit{}
	var unitNode *yaml.Node
	unit := ""
	for k, v := range pairs(m) {
		switch k.Value {
		case "requests_per_unit":
			if v.Tag == "!!null" {
				continue
			}
			n, err := strconv.ParseUint(v.Value, 0, 32)
			if v.Tag != "!!int" || err != nil {
				p.errorf(v, "error loading config file: requests_per_unit %s is not a whole number from 0 to %d", v.Value, uint32(1<<32-1))
				continue
			}
			l.RequestsPerUnit = uint32(n)
		case "unit":
			unitNode = v
			unit = strings.ToLower(p.str(v))
		case "unlimited":
			l.Unlimited = p.boolean(v)
		case "name":
			l.Name = p.str(v)
		case "replaces":
			l.Replaces = p.replaces(v)
		default:
			p.warnf(k, "%q in rate_limit is ignored, as envoyproxy/ratelimit ignores it", k.Value)
		}
	}
	_, valid := Units[unit]
	switch {
	case l.Unlimited && valid:
		p.errorf(unitNode, "should not specify rate limit unit when unlimited")
	case !l.Unlimited && !valid:
		at := unitNode
		if at == nil {
			at = m
		}
		p.errorf(at, "invalid rate limit unit '%s' (second, minute, hour, day, week, month or year)", unit)
	case !l.Unlimited:
		l.Unit = unit
	}
	for _, r := range l.Replaces {
		if r == "" {
			p.errorf(m, "should not have an empty replaces entry")
		} else if r == l.Name {
			p.errorf(m, "replaces should not contain name of same descriptor")
		}
	}
	return l
}

func (p *parser) replaces(v *yaml.Node) []string {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, "error loading config file: replaces must be a list of {name: ...}")
		return nil
	}
	var out []string
	for _, e := range v.Content {
		name := ""
		if e.Kind == yaml.MappingNode {
			for k, v := range pairs(e) {
				if k.Value == "name" {
					name = p.str(v)
				}
			}
		}
		out = append(out, name)
	}
	return out
}
