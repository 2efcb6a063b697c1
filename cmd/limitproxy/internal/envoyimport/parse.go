// Package envoyimport converts envoyproxy/ratelimit's YAML configuration
// (one domain per file, a tree of descriptors with rate limits) into
// limitproxy's TOML, for the RLS face. It loads what envoyproxy/ratelimit
// loads and refuses what it refuses, with the same checks, each at its
// file, line and column; and it says in the output what it carries over
// otherwise than the reference has it.
//
// The checks follow envoyproxy/ratelimit's src/config/config_impl.go
// (ConfigFileContentToYaml, validateYamlKeys, loadConfig,
// loadDescriptors), on the same YAML library (gopkg.in/yaml.v2, which
// go.yaml.in/yaml/v2 is, unchanged): keys outside its known set, keys that
// are not strings, lists of anything but maps, values that are not
// strings, integers, booleans or null, values its structures cannot hold,
// an empty domain or key, a duplicate key/value at one level, a unit that
// is not one of its units, a unit beside unlimited, an empty or self
// replaces entry, share_threshold on a key/value without '*', metadata
// that is no map. Positions come from a second reading of the same bytes
// (go.yaml.in/yaml/v3's nodes), which the first, the reference's, does
// not keep.
package envoyimport

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v2"
	yaml3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"
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
	// MetadataMap is the metadata with string keys, as the reference
	// makes a protobuf Struct of it; nil for none.
	MetadataMap map[string]interface{}
	Children    []*Node
	Line, Col   int
	// literal marks the import's copy of a wildcard descriptor that
	// matches its value as written, '*' and all: the reference looks a
	// value up literally before it tries the wildcards.
	literal bool
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

// The reference's YAML structures, as yaml.v2 decodes into them: the
// same fields, names and tags (a field's key is its name in lower case),
// so that a value decodes or fails to as it does there. Their names are
// the reference's too, as its errors show them.
type (
	yamlReplaces struct {
		Name string
	}
	YamlRateLimit struct {
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
		Unit            string
		Unlimited       bool `yaml:"unlimited"`
		Name            string
		Replaces        []yamlReplaces
	}
	YamlDescriptor struct {
		Key            string
		Value          string
		RateLimit      *YamlRateLimit `yaml:"rate_limit"`
		Descriptors    []YamlDescriptor
		ShadowMode     bool `yaml:"shadow_mode"`
		QuotaMode      bool `yaml:"quota_mode"`
		DetailedMetric bool `yaml:"detailed_metric"`
		ValueToMetric  bool `yaml:"value_to_metric"`
		ShareThreshold bool `yaml:"share_threshold"`
		Metadata       map[string]interface{}
	}
	YamlRoot struct {
		Domain      string
		Descriptors []YamlDescriptor
	}
)

// referenceUnits are the reference's units: the names of its
// RateLimitResponse.RateLimit.Unit but UNKNOWN, which a YAML unit is
// matched against in upper case (strings.ToUpper).
var referenceUnits = []string{"SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR"}

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

// parser holds one file's refusals and notes, and its node tree for
// positions (nil when the second reading failed).
type parser struct {
	file     string
	root     *yaml3.Node
	errs     Errors
	warnings []Warning
}

// errorAt records a refusal at n (nil: no position).
func (p *parser) errorAt(n *yaml3.Node, format string, args ...any) {
	e := Error{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) warnAt(n *yaml3.Node, format string, args ...any) {
	w := Warning{File: p.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		w.Line, w.Col = n.Line, n.Column
	}
	p.warnings = append(p.warnings, w)
}

// yamlLine finds the line yaml.v2 names in an error ("line 4: …").
var yamlLine = regexp.MustCompile(`line (\d+):`)

// errorFromYAML records a yaml.v2 error as the reference words it
// ("error loading config file: " and yaml's text, its Go types under the
// reference's package name), at the line it names: one refusal per line
// of a yaml.TypeError.
func (p *parser) errorFromYAML(err error) {
	fix := func(s string) string { return strings.ReplaceAll(s, "envoyimport.", "config.") }
	var msgs []string
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	for _, m := range msgs {
		e := Error{File: p.file, Msg: "error loading config file: yaml: " + fix(m)}
		if _, ok := err.(*yaml.TypeError); ok {
			e.Msg = "error loading config file: yaml: unmarshal errors: " + fix(m)
		}
		if sm := yamlLine.FindStringSubmatch(m); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			value := ""
			if vm := yamlValue.FindStringSubmatch(m); vm != nil {
				value = vm[1]
			}
			e.Col = p.columnOf(e.Line, value)
		}
		p.errs = append(p.errs, e)
	}
}

// yamlValue finds the value a yaml.v2 type error quotes ("`-3`").
var yamlValue = regexp.MustCompile("`([^`]*)`")

// columnOf is the column, on line, of the scalar value (when one of the
// line's is), else of the line's first node: for an error yaml.v2 places
// by its line only; 1 when none is known.
func (p *parser) columnOf(line int, value string) int {
	first, of := 0, 0
	var walk func(n *yaml3.Node)
	walk = func(n *yaml3.Node) {
		if n == nil {
			return
		}
		if n.Line == line && n.Kind != yaml3.DocumentNode {
			if first == 0 || n.Column < first {
				first = n.Column
			}
			if value != "" && n.Kind == yaml3.ScalarNode && n.Value == value && (of == 0 || n.Column < of) {
				of = n.Column
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(p.root)
	return max(cmp.Or(of, first), 1)
}

// Parse reads one envoyproxy/ratelimit YAML file, as the reference's
// ConfigFileContentToYaml and loadConfig read one (name is used in
// messages). It returns every refusal of the file as Errors.
func Parse(name string, src []byte) (*Domain, []Warning, error) {
	p := &parser{file: name}
	var doc yaml3.Node
	if yaml3.Unmarshal(src, &doc) == nil && len(doc.Content) > 0 {
		p.root = doc.Content[0]
	}
	// The reference's first reading: a generic map whose keys and leaves
	// it checks.
	var generic map[interface{}]interface{}
	if err := yaml.Unmarshal(src, &generic); err != nil {
		p.errorFromYAML(err)
		return nil, nil, p.sorted()
	}
	p.checkKeys(generic, p.root)
	if len(p.errs) > 0 {
		// What the structures would make of such keys and values says
		// nothing more.
		return nil, nil, p.sorted()
	}
	// Its second: the structures. (The reference stops at the first
	// refusal; the import goes on, to show every one.)
	var root YamlRoot
	if err := yaml.Unmarshal(src, &root); err != nil {
		p.errorFromYAML(err)
		return nil, nil, p.sorted()
	}
	d := &Domain{File: name, Name: root.Domain}
	if n := child(p.root, "domain"); n != nil {
		d.Line = n.Line
	}
	if root.Domain == "" {
		p.errorAt(child(p.root, "domain"), "config file cannot have empty domain")
		return nil, nil, p.sorted()
	}
	for k := range pairs(p.root) {
		switch k.Value {
		case "domain", "descriptors":
		case "metadata":
			p.warnAt(k, "domain-level metadata is ignored, as envoyproxy/ratelimit ignores it")
		default:
			p.warnAt(k, "%q at the top level is ignored, as envoyproxy/ratelimit ignores it", k.Value)
		}
	}
	d.Nodes = p.descriptors(root.Domain+".", root.Descriptors, child(p.root, "descriptors"))
	if len(p.errs) > 0 {
		return nil, nil, p.sorted()
	}
	return d, p.warnings, nil
}

// sorted returns p's refusals in the order of the file.
func (p *parser) sorted() Errors {
	slices.SortStableFunc(p.errs, func(a, b Error) int { return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col)) })
	return p.errs
}

// pairs yields a mapping node's key and value nodes, those a merge key
// (<<) brings in included, after the mapping's own.
func pairs(m *yaml3.Node) func(func(k, v *yaml3.Node) bool) {
	return func(yield func(k, v *yaml3.Node) bool) {
		m = resolve(m)
		if m == nil || m.Kind != yaml3.MappingNode {
			return
		}
		var merged []*yaml3.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" {
				if v = resolve(v); v.Kind == yaml3.SequenceNode {
					merged = append(merged, v.Content...)
				} else {
					merged = append(merged, v)
				}
				continue
			}
			if !yield(k, v) {
				return
			}
		}
		for _, mm := range merged {
			for k, v := range pairs(mm) {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// resolve follows an alias.
func resolve(n *yaml3.Node) *yaml3.Node {
	for n != nil && n.Kind == yaml3.AliasNode {
		n = n.Alias
	}
	return n
}

// childKey is the key node of key in mapping m, nil if none (or m nil).
func childKey(m *yaml3.Node, key string) *yaml3.Node {
	for k := range pairs(m) {
		if k.Value == key {
			return k
		}
	}
	return nil
}

// child is the value node of key in mapping m, nil if none.
func child(m *yaml3.Node, key string) *yaml3.Node {
	for k, v := range pairs(m) {
		if k.Value == key {
			return resolve(v)
		}
	}
	return nil
}

// item is element i of sequence s, nil if none.
func item(s *yaml3.Node, i int) *yaml3.Node {
	if s = resolve(s); s == nil || s.Kind != yaml3.SequenceNode || i >= len(s.Content) {
		return nil
	}
	return resolve(s.Content[i])
}

// either is n, or at when n is nil: the nearest position known.
func either(n, at *yaml3.Node) *yaml3.Node {
	if n != nil {
		return n
	}
	return at
}

// checkKeys applies envoyproxy/ratelimit's validateYamlKeys to the map m
// (whose node is at): every key a string of its known set, every list a
// list of maps, every leaf a string, an integer, a boolean or null;
// metadata's contents are free.
func (p *parser) checkKeys(m map[interface{}]interface{}, at *yaml3.Node) {
	keys := make([]interface{}, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		v := m[k]
		ks, ok := k.(string)
		kn := either(childKey(at, fmt.Sprint(k)), at)
		if !ok {
			p.errorAt(kn, "config error, key is not of type string: %v", k)
			continue
		}
		if !validKeys[ks] {
			p.errorAt(kn, "config error, unknown key '%s'", ks)
			continue
		}
		if ks == "metadata" {
			continue
		}
		vn := either(child(at, ks), kn)
		switch v := v.(type) {
		case []interface{}:
			for i, e := range v {
				en := either(item(vn, i), vn)
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					p.errorAt(en, "config error, yaml file contains list of type other than map: %v", e)
					continue
				}
				p.checkKeys(em, en)
			}
		case map[interface{}]interface{}:
			p.checkKeys(v, vn)
		case string, int, bool, nil:
		default:
			p.errorAt(vn, "error checking config (%v is a %T: a value is a string, an integer, a boolean or null)", v, v)
		}
	}
}

// descriptors loads the descriptors ds below parent, the full key of the
// level ("domain." or "domain.key_value."), as loadDescriptors does;
// list is their sequence node.
func (p *parser) descriptors(parent string, ds []YamlDescriptor, list *yaml3.Node) []*Node {
	var nodes []*Node
	seen := map[string]*Node{}
	for i := range ds {
		yd := &ds[i]
		at := either(item(list, i), list)
		n := &Node{Key: yd.Key, Value: yd.Value, ShadowMode: yd.ShadowMode, QuotaMode: yd.QuotaMode,
			DetailedMetric: yd.DetailedMetric, ValueToMetric: yd.ValueToMetric, ShareThreshold: yd.ShareThreshold}
		if at != nil {
			n.Line, n.Col = at.Line, at.Column
		}
		// A refused descriptor's contents are checked too, so that one
		// reading shows every problem (the reference stops at the first).
		keep := true
		fk := n.FinalKey()
		if n.Key == "" {
			p.errorAt(either(child(at, "key"), at), "descriptor has empty key")
			keep = false
		} else if first, dup := seen[fk]; dup {
			p.errorAt(at, "duplicate descriptor composite key '%s%s' (first at line %d)", parent, fk, first.Line)
			keep = false
		} else {
			seen[fk] = n
		}
		if yd.RateLimit != nil {
			n.Limit = p.limit(yd.RateLimit, either(child(at, "rate_limit"), at))
		}
		if n.ShareThreshold && !strings.Contains(fk, "*") {
			p.errorAt(either(child(at, "share_threshold"), at), "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", fk)
		}
		if yd.Metadata != nil {
			if _, err := structpb.NewStruct(stringKeys(yd.Metadata).(map[string]interface{})); err != nil {
				p.errorAt(either(child(at, "metadata"), at), "error parsing metadata: %s", err)
			}
			n.Metadata = len(yd.Metadata) > 0
			if n.Metadata {
				n.MetadataMap = stringKeys(yd.Metadata).(map[string]interface{})
			}
		}
		for k := range pairs(at) {
			if !descriptorKeys[k.Value] && validKeys[k.Value] {
				p.warnAt(k, "%q in a descriptor is ignored, as envoyproxy/ratelimit ignores it", k.Value)
			}
		}
		n.Children = p.descriptors(parent+fk+".", yd.Descriptors, child(at, "descriptors"))
		if keep {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// descriptorKeys are the keys a descriptor reads.
var descriptorKeys = map[string]bool{
	"key": true, "value": true, "rate_limit": true, "descriptors": true, "shadow_mode": true, "quota_mode": true,
	"detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
}

// stringKeys converts the maps of v to string keys, as the reference's
// convertMap does before it makes a protobuf Struct of metadata.
func stringKeys(v interface{}) interface{} {
	switch v := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, e := range v {
			out[fmt.Sprintf("%v", k)] = stringKeys(e)
		}
		return out
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, e := range v {
			out[k] = stringKeys(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, e := range v {
			out[i] = stringKeys(e)
		}
		return out
	}
	return v
}

// limit checks a descriptor's rate_limit (at its node) as loadDescriptors
// does: a unit of the reference's, in any case, unless unlimited, and
// none then; replaces entries named, and not the limit's own name.
func (p *parser) limit(yl *YamlRateLimit, at *yaml3.Node) *Limit {
	l := &Limit{RequestsPerUnit: yl.RequestsPerUnit, Unlimited: yl.Unlimited, Name: yl.Name}
	upper := strings.ToUpper(yl.Unit)
	valid := slices.Contains(referenceUnits, upper)
	unitAt := either(child(at, "unit"), at)
	switch {
	case l.Unlimited && valid:
		p.errorAt(unitAt, "should not specify rate limit unit when unlimited")
	case !l.Unlimited && !valid:
		p.errorAt(unitAt, "invalid rate limit unit '%s' (second, minute, hour, day, week, month or year, in any case)", yl.Unit)
	case !l.Unlimited:
		l.Unit = strings.ToLower(upper)
	}
	for i, r := range yl.Replaces {
		rat := either(item(child(at, "replaces"), i), at)
		switch {
		case r.Name == "":
			p.errorAt(rat, "should not have an empty replaces entry")
		case r.Name == yl.Name:
			p.errorAt(rat, "replaces should not contain name of same descriptor")
		}
		l.Replaces = append(l.Replaces, r.Name)
	}
	for k := range pairs(at) {
		if !limitKeys[k.Value] && validKeys[k.Value] {
			p.warnAt(k, "%q in rate_limit is ignored, as envoyproxy/ratelimit ignores it", k.Value)
		}
	}
	return l
}

// limitKeys are the keys a rate_limit reads.
var limitKeys = map[string]bool{"requests_per_unit": true, "unit": true, "unlimited": true, "name": true, "replaces": true}
