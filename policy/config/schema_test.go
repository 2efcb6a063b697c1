package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// config.schema.json, at the root of the repository, is the JSON Schema of
// a configuration file (draft 2020-12), for editors that complete and check
// TOML against one (taplo, Even Better TOML). It is generated from the
// code, never written by hand: its shape from the raw decode structs of
// file.go and their toml tags, its enums from the lists the validator
// checks (validate.go), its defaults from defaults.go, its ranges from the
// validator's bounds (and the limiter's constants), and its descriptions
// from docs/configuration.md's tables. TestSchemaFile fails when the
// committed file differs from what these give; regenerate it with
//
//go:generate go test -run ^TestSchemaFile$ -update .

const schemaFile = "../../config.schema.json"

// TestSchemaFile regenerates the schema in memory and compares it with the
// committed file (with -update, rewrites the file).
func TestSchemaFile(t *testing.T) {
	docs, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := generateSchema(docs)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("config.schema.json is not what the code and docs/configuration.md give: run go generate ./policy/config")
	}
}

// node is one JSON Schema object.
type node = map[string]any

// Patterns of the schema. They use the syntax that ECMA-262, RE2 and
// Rust's regex share (what editors and validators use): no escapes above
// \x7f, no look-around, no flags.
const (
	durationUnit = `(ns|us|µs|μs|ms|s|m|h)`
	// A Go duration (time.ParseDuration) that is not negative.
	durationRE = `^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)` + durationUnit + `)+$|^[+-]?0$`
	// A duration that is zero, however written.
	zeroDurationRE = `^[+-]?((0+(\.0*)?|\.0+)` + durationUnit + `)+$|^[+-]?0$`
	// An RFC 9110 token: a header or cookie name.
	tokenRE = "[!#$%&'*+.^_`|~0-9A-Za-z-]+"
	// A port, 1 to 65535.
	portRE  = `([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])`
	octetRE = `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	labelRE = `[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?`
)

// anyCase turns a literal into a pattern that matches it in any case
// ("X-Ip" → "[Xx]-[Ii][Pp]"), since JSON Schema patterns have no flags.
func anyCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r))
		switch {
		case lo != up:
			b.WriteString("[" + up + lo + "]")
		case strings.ContainsRune(`.+*?()[]{}|^$\`, r):
			b.WriteString(`\` + string(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anyCaseOf is a pattern matching one of names, whole, in any case.
func anyCaseOf(prefix string, names []string) string {
	alts := make([]string, len(names))
	for i, n := range names {
		alts[i] = anyCase(n)
	}
	return "^" + prefix + "(" + strings.Join(alts, "|") + ")$"
}

// defs are the schema's shared definitions.
func defs() node {
	clientAddr := append([]string{"X-Forwarded-For", "Forwarded"}, ClientAddressHeaders[:]...)
	return node{
		"duration": node{
			"type": "string", "pattern": durationRE,
			"description": `a length of time with a unit: "250ms", "30s", "1m", "1h30m" (a bare integer is an error)`,
		},
		"positiveDuration": node{
			"$ref": "#/$defs/duration", "not": node{"pattern": zeroDurationRE},
			"description": `a length of time above zero, with a unit: "250ms", "30s", "1m"`,
		},
		"rate": node{
			"type": "string",
			// The count, 1 to 1e9 (the schema checks up to ten digits),
			// then s, m, h, d or a positive duration.
			"pattern":     `^\s*\+?0*[1-9][0-9]{0,9}\s*/\s*(s|m|h|d|(([0-9]+(\.[0-9]*)?|\.[0-9]+)` + durationUnit + `)+)\s*$`,
			"description": `N per period: "10/s", "600/m", "1000/h", "50000/d" or "30/5m"; N from 1 to 1000000000`,
		},
		"cidr": node{
			"type": "string",
			"anyOf": []node{
				{"pattern": `^(` + octetRE + `\.){3}` + octetRE + `(/([0-9]|[12][0-9]|3[0-2]))?$`},
				{"pattern": `^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))?$`},
			},
			"description": `a network in CIDR notation ("10.0.0.0/8", "2001:db8::/32"), or one address`,
		},
		"headerName": node{"type": "string", "pattern": "^" + tokenRE + "$"},
		"name": node{
			"type": "string", "pattern": nameRE.String(),
			"description": "letters, digits, '.', '_' and '-', starting with a letter or digit",
		},
		"keyPart": node{
			"type": "string",
			"anyOf": []node{
				{"enum": []string{"ip", "host", "method", "path"}},
				{"pattern": "^(query:[\\s\\S]+|cookie:" + tokenRE + ")$"},
				// An RLS policy's (match.rls_domain) only.
				{"pattern": "^descriptor:[\\s\\S]+$"},
				// A client-address header is no key part: the proxy
				// rewrites it on its way upstream.
				{"pattern": "^header:" + tokenRE + "$", "not": node{"pattern": anyCaseOf("header:", clientAddr)}},
			},
			"description": `ip, host, method, path, header:NAME, query:NAME or cookie:NAME (not a client-address header such as X-Forwarded-For: key those by ip); in an RLS policy only descriptor:KEY`,
		},
		"status": node{
			"anyOf": []node{
				{"type": "integer", "minimum": 100, "maximum": 599},
				{"type": "string", "pattern": "^[1-5][Xx][Xx]$"},
			},
			"description": `an HTTP status (401) or a class ("4xx")`,
		},
		"share": node{
			"anyOf": []node{
				{"type": "number", "minimum": 0, "exclusiveMaximum": 1},
				{"type": "string", "pattern": `^\s*([0-9]{1,2}(\.[0-9]*)?|\.[0-9]+)\s*%$`},
			},
			"description": `a fraction from 0 to below 1 (0.2), or a percentage below 100 ("20%")`,
		},
	}
}

// typeSchema is the schema of one value type of types.go.
func typeSchema(t reflect.Type) (node, bool) {
	switch t {
	case reflect.TypeFor[scalar[string]]():
		return node{"type": "string"}, true
	case reflect.TypeFor[scalar[int64]]():
		return node{"type": "integer"}, true
	case reflect.TypeFor[scalar[bool]]():
		return node{"type": "boolean"}, true
	case reflect.TypeFor[replayValue]():
		return node{"anyOf": []node{{"type": "boolean"}, {"enum": replayValues}}}, true
	case reflect.TypeFor[stringList]():
		return node{"type": "array", "items": node{"type": "string"}}, true
	case reflect.TypeFor[durationValue]():
		return node{"$ref": "#/$defs/duration"}, true
	case reflect.TypeFor[windowValue]():
		return node{"type": "string"}, true
	case reflect.TypeFor[zoneValue]():
		return node{"type": "string"}, true
	case reflect.TypeFor[rateValue]():
		return node{"$ref": "#/$defs/rate"}, true
	case reflect.TypeFor[cidrs]():
		return node{"type": "array", "items": node{"$ref": "#/$defs/cidr"}}, true
	case reflect.TypeFor[share]():
		return node{"$ref": "#/$defs/share"}, true
	case reflect.TypeFor[statuses]():
		return node{"type": "array", "items": node{"$ref": "#/$defs/status"}}, true
	case reflect.TypeFor[metadataValue]():
		return node{"type": "object"}, true
	case reflect.TypeFor[map[string]scalar[string]]():
		return node{"type": "object", "propertyNames": node{"$ref": "#/$defs/headerName"}, "additionalProperties": node{"type": "string"}}, true
	}
	return nil, false
}

// schemaWalker builds the schema of a raw struct, path by path ("server",
// "upstream[].concurrency", "policy[].limits[].rate").
type schemaWalker struct {
	nodes  map[string]node   // every path's schema
	leaves []string          // the paths of values (not tables)
	omit   map[string]string // path → reason it is not a key there
}

func (w *schemaWalker) walk(t reflect.Type, path string) node {
	if s, ok := typeSchema(t); ok {
		w.nodes[path] = s
		w.leaves = append(w.leaves, path)
		return s
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.walk(t.Elem(), path)
	case reflect.Slice:
		s := node{"type": "array", "items": w.walk(t.Elem(), path+"[]")}
		w.nodes[path] = s
		return s
	case reflect.Struct:
		props := node{}
		for i := range t.NumField() {
			key := t.Field(i).Tag.Get("toml")
			if key == "" {
				continue
			}
			p := join(strings.TrimSuffix(path, "."), key)
			if _, omitted := w.omit[p]; omitted {
				continue
			}
			props[key] = w.walk(t.Field(i).Type, p)
		}
		s := node{"type": "object", "properties": props, "additionalProperties": false}
		w.nodes[path] = s
		return s
	}
	panic(fmt.Sprintf("schema: no schema for %v at %s", t, path))
}

// generateSchema builds config.schema.json from the code and the
// descriptions of docs (docs/configuration.md).
func generateSchema(docs []byte) ([]byte, error) {
	w := &schemaWalker{nodes: map[string]node{}, omit: map[string]string{
		"shared_limit[].shared":        "a [[policy.limits]] key",
		"shared_limit[].count":         "charged after the answer: a policy's own limit only",
		"shared_limit[].cost_from":     "charged after the answer: a policy's own limit only",
		"shared_limit[].estimate":      "charged after the answer: a policy's own limit only",
		"shared_limit[].estimate_from": "charged after the answer: a policy's own limit only",
	}}
	root := w.walk(reflect.TypeFor[rawFile](), "")
	var errs []string
	refine := func(path string, kv node) {
		n, ok := w.nodes[path]
		if !ok {
			errs = append(errs, "refinement of unknown path "+path)
			return
		}
		for k, v := range kv {
			n[k] = v
		}
	}

	refine("", node{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"title":   "limitproxy configuration",
		"description": "A limitproxy configuration file (docs/configuration.md). Generated from the code by " +
			"go generate ./policy/config; limitproxy check -config FILE checks what a schema cannot " +
			"(names that refer to each other, policy order).",
		"required": []string{"policy"},
		// An HTTP policy needs an upstream; a file of RLS policies alone
		// has none.
		"if": node{"properties": node{"policy": node{"contains": node{"not": node{
			"properties": node{"match": node{"required": []string{"rls_domain"}}}, "required": []string{"match"}}}}}},
		"then": node{"required": []string{"upstream"}},
		// access_replay = "hashed" hashes under the key hash secret.
		"allOf": []node{{
			"if": node{"properties": node{"log": node{"properties": node{"access_replay": node{"const": ReplayHashed}},
				"required": []string{"access_replay"}}}, "required": []string{"log"}},
			"then": node{"properties": node{"admin": node{"properties": node{"key_hash_secret_env": node{"minLength": 1}},
				"required": []string{"key_hash_secret_env"}}}, "required": []string{"admin"}},
		}},
		"$defs": defs(),
	})
	// [server]
	positive := node{"$ref": "#/$defs/positiveDuration"}
	hopByHopNames := []string{"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding",
		"Upgrade", "Proxy-Authorization", "Proxy-Authenticate", "Content-Length", "Host"}
	refine("server.listen", node{"minLength": 1})
	refine("server.max_header_bytes", node{"minimum": 1024, "maximum": 16 << 20})
	refine("server.max_connections", node{"minimum": 0, "maximum": 1 << 30})
	refine("server.trusted_hops", node{"minimum": 0, "maximum": MaxTrustedHops})
	refine("server.ipv6_prefix", node{"minimum": 1, "maximum": 128})
	refine("server.rate_limit_headers", node{"enum": headersModes})
	refine("server.ambiguous_key_parts", node{"enum": ambiguousModes})
	refine("server.http1", node{"enum": implementations})
	refine("server.client_body_timeout", positive)
	refine("server.send_timeout", positive)
	refine("server.client_ip_header", node{"$ref": "#/$defs/headerName", "not": node{"pattern": anyCaseOf("", hopByHopNames)}})
	refine("server", node{"allOf": []node{
		{
			"if":   node{"properties": node{"trusted_hops": node{"minimum": 1}}, "required": []string{"trusted_hops"}},
			"then": node{"properties": node{"trusted_proxies": node{"minItems": 1}}, "required": []string{"trusted_proxies"}},
		},
		{
			"if":   node{"required": []string{"proxy_protocol_from"}},
			"then": node{"properties": node{"proxy_protocol": node{"const": true}, "proxy_protocol_from": node{"minItems": 1}}, "required": []string{"proxy_protocol"}},
		},
		{
			"if": node{"properties": node{"proxy_protocol": node{"const": true}}, "required": []string{"proxy_protocol"}},
			"then": node{"anyOf": []node{
				{"required": []string{"proxy_protocol_from"}},
				{"properties": node{"trusted_proxies": node{"minItems": 1}}, "required": []string{"trusted_proxies"}},
			}},
		},
		{
			"if":   node{"properties": node{"client_ip_header": node{"pattern": "_"}}, "required": []string{"client_ip_header"}},
			"then": node{"properties": node{"underscores_in_headers": node{"const": true}}, "required": []string{"underscores_in_headers"}},
		},
	}})
	// [server.tls]
	refine("server.tls.mode", node{"enum": tlsModes})
	refine("server.tls", node{
		"required": []string{"mode"},
		"allOf": []node{
			{
				"if":   node{"properties": node{"mode": node{"const": TLSFiles}}, "required": []string{"mode"}},
				"then": node{"properties": node{"cert_file": node{"minLength": 1}, "key_file": node{"minLength": 1}}, "required": []string{"cert_file", "key_file"}},
			},
			{
				"if":   node{"properties": node{"mode": node{"const": TLSACME}}, "required": []string{"mode"}},
				"then": node{"properties": node{"domains": node{"minItems": 1}}, "required": []string{"domains"}},
			},
		},
	})
	// [admin]
	refine("admin.top_keys", node{"enum": topKeysValues})
	refine("forward_auth.deny_status", node{"enum": []int{401, 403}})
	refine("admin.token_env", node{"pattern": "^(" + strings.Trim(envName.String(), "^$") + ")?$"})
	refine("admin.key_hash_secret_env", node{"pattern": "^(" + strings.Trim(envName.String(), "^$") + ")?$"})
	refine("admin.allowed_hosts", node{"items": node{"type": "string", "anyOf": []node{
		{"pattern": "^" + labelRE + `(\.` + labelRE + `)*\.?(:` + portRE + ")?$"},
		{"pattern": `^\[[0-9A-Fa-f:.]+\](:` + portRE + ")?$"},
	}}})
	// [log]
	refine("log.level", node{"enum": logLevels})
	refine("log.format", node{"enum": logFormats})
	refine("log.client_address", node{"enum": clientAddresses})
	// [store]
	refine("store.backend", node{"enum": backends})
	refine("store.max_keys", node{"minimum": 1})
	refine("store.redis.on_error", node{"enum": onErrors})
	refine("store", node{"if": node{"properties": node{"backend": node{"const": BackendRedis}}, "required": []string{"backend"}},
		"then": node{"properties": node{"redis": node{
			"properties": node{
				"addrs":        node{"minItems": 1},
				"timeout":      positive,
				"db":           node{"minimum": 0},
				"password_env": node{"pattern": "^(" + strings.Trim(envName.String(), "^$") + ")?$"},
			},
			// Redis Cluster (several addrs, no master_name) has only
			// database 0.
			"if": node{
				"properties": node{"addrs": node{"minItems": 2}, "master_name": node{"const": ""}},
				"required":   []string{"addrs"},
			},
			"then": node{"properties": node{"db": node{"const": 0}}},
		}}},
	})
	// [[upstream]]
	refine("upstream", node{"minItems": 1})
	refine("upstream[]", node{"required": []string{"name", "targets"}})
	refine("upstream[].name", node{"minLength": 1})
	refine("upstream[].targets", node{"minItems": 1, "items": node{"type": "string", "pattern": `^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]+`}})
	refine("upstream[].timeout", positive)
	refine("upstream[].max_fails", node{"minimum": 0})
	refine("upstream[].upgrades", node{"items": node{"type": "string", "pattern": "^" + tokenRE + "(/[^/]*)?$"}})
	refine("upstream[].protocol", node{"enum": upstreamProtocols})
	refine("upstream[].transport", node{"enum": implementations})
	refine("upstream[].max_body_bytes", node{"minimum": 1})
	refine("upstream[].min_body_rate", node{"minimum": 0, "maximum": 1 << 30})
	refine("upstream[].body_rate_window", positive)
	refine("upstream[].max_streams_per_key", node{"minimum": 1, "maximum": 1_000_000})
	refine("upstream[]", node{
		"if": node{"properties": node{"protocol": node{"const": ProtocolH2C}}, "required": []string{"protocol"}},
		"then": node{"properties": node{"targets": node{"items": node{"pattern": "^[Hh][Tt][Tt][Pp]://"}},
			"transport": node{"const": ImplNetHTTP}}},
	})
	refine("upstream[].concurrency.limit", node{"minimum": 1, "maximum": 1_000_000})
	refine("upstream[].concurrency.min_limit", node{"minimum": 1, "maximum": 1_000_000})
	refine("upstream[].concurrency.max_limit", node{"minimum": 1, "maximum": 1_000_000})
	refine("upstream[].concurrency.queue", node{"minimum": 0, "maximum": 1_000_000})
	refine("upstream[].concurrency.mode", node{"enum": modes})
	refine("upstream[].concurrency.classes", node{"maxItems": MaxClasses})
	refine("upstream[].concurrency.classes[]", node{"required": []string{"name"}})
	refine("upstream[].concurrency.classes[].name", node{"$ref": "#/$defs/name"})
	refine("upstream[].concurrency", node{
		"if": node{"not": node{"properties": node{"adaptive": node{"const": true}}, "required": []string{"adaptive"}}},
		"then": node{
			"required":   []string{"limit"},
			"properties": node{"min_limit": false, "max_limit": false},
		},
	})
	// [[shared_limit]] and [[policy.limits]]
	for _, p := range []string{"shared_limit[]", "policy[].limits[]"} {
		refineLimit(p, refine)
	}
	refine("shared_limit[]", node{"required": []string{"name", "algorithm"}})
	refine("shared_limit[].name", node{"$ref": "#/$defs/name"})
	refine("policy[].limits[].shared", node{"$ref": "#/$defs/name"})
	refine("policy[].limits[].name", node{"$ref": "#/$defs/name"})
	refine("policy[].limits[].cost_from", node{"pattern": "^(header|trailer):" + tokenRE + "$"})
	refine("policy[].limits[].estimate", node{"minimum": 1, "maximum": limiter.MaxCount})
	refine("policy[].limits[].estimate_from", node{"pattern": "^(average|header:" + tokenRE + ")$"})
	refine("policy[].limits[].count", node{"anyOf": []node{{"required": []string{"status"}}, {"required": []string{"header"}}}})
	refine("policy[].limits[].count.status", node{"minItems": 1})
	refine("policy[].limits[].count.header", node{"$ref": "#/$defs/headerName"})
	leaky := node{"properties": node{"algorithm": node{"const": limiter.LeakyBucket.String()}}, "required": []string{"algorithm"}}
	refine("policy[].limits[]", node{
		// One of its own, or shared = "NAME" alone.
		"if":                node{"required": []string{"shared"}},
		"then":              node{"propertyNames": node{"const": "shared"}},
		"else":              node{"required": []string{"algorithm"}},
		"dependentRequired": node{"estimate": []string{"cost_from"}, "estimate_from": []string{"cost_from"}},
		"dependentSchemas": node{
			"cost_from": node{"properties": node{"cost": false}},
			// A leaky bucket schedules a request as it is admitted.
			"count": node{"not": leaky},
		},
	})
	refine("policy[].limits[]", node{"allOf": append(w.nodes["policy[].limits[]"]["allOf"].([]node),
		node{"if": leaky, "then": node{"properties": node{"cost_from": false}}})})
	// [[policy]]
	refine("policy", node{"minItems": 1})
	rlsPolicy := node{"properties": node{"match": node{"required": []string{"rls_domain"}}}, "required": []string{"match"}}
	refine("policy[]", node{
		"required": []string{"name"},
		"allOf": []node{
			{
				// An RLS policy has no upstream; any other needs one, and
				// has neither the RLS policy's keys nor a limit of 0.
				"if":   rlsPolicy,
				"then": node{"properties": node{"upstream": false}},
				"else": node{"required": []string{"upstream"}, "properties": node{
					"unlimited": false, "quota_mode": false, "replaces": false,
					"limits": node{"items": node{"properties": node{"limit": node{"minimum": 1}}}},
				}},
			},
			{
				// Rate limits, a [policy.concurrency], or both; an RLS
				// policy may have none.
				"if":   node{"not": node{"anyOf": []node{{"required": []string{"concurrency"}}, rlsPolicy}}},
				"then": node{"required": []string{"limits"}, "properties": node{"limits": node{"minItems": 1}}},
			},
			{
				// An unlimited policy has no limits; a quota is a limit.
				"if":   node{"properties": node{"unlimited": node{"const": true}}, "required": []string{"unlimited"}},
				"then": node{"properties": node{"limits": node{"maxItems": 0}}},
			},
			{
				"if":   node{"properties": node{"quota_mode": node{"const": true}}, "required": []string{"quota_mode"}},
				"then": node{"required": []string{"limits"}, "properties": node{"limits": node{"minItems": 1}}},
			},
			{
				// A ban follows a rejection by one of its limits.
				"if":   node{"required": []string{"ban"}},
				"then": node{"required": []string{"limits"}, "properties": node{"limits": node{"minItems": 1}}},
			},
		},
	})
	refine("policy[].name", node{"$ref": "#/$defs/name"})
	refine("policy[].upstream", node{"minLength": 1})
	refine("policy[].mode", node{"enum": modes})
	refine("policy[].key", node{"items": node{"$ref": "#/$defs/keyPart"}})
	refine("policy[].on_missing", node{"enum": onMissings})
	refine("policy[].limits", node{"maxItems": limiter.MaxLimits,
		// At most one leaky bucket: a request waits in one queue.
		"contains": leaky, "minContains": 0, "maxContains": 1})
	refine("policy[].match.hosts", node{"items": node{"type": "string", "pattern": `^(\*\.)?[^*]+$`}})
	refine("policy[].match.methods", node{"items": node{"type": "string", "pattern": "^[^a-z \t/]+$"}})
	refine("policy[].match.path", node{"pattern": "^/"})
	refine("policy[].match.path_prefix", node{"pattern": "^/"})
	refine("policy[].concurrency", node{"required": []string{"limit"}})
	refine("policy[].concurrency.limit", node{"minimum": 1, "maximum": 1_000_000})
	refine("policy[].concurrency.queue", node{"minimum": 0, "maximum": 1_000_000})
	refine("policy[].ban", node{"required": []string{"duration"}})
	refine("policy[].ban.duration", positive)
	refine("policy[].ban.escalation", node{"minimum": 1, "maximum": 1000})
	refine("policy[].ban.status", node{"enum": []int{429, 403}})
	refine("policy[].ban.mode", node{"enum": modes})
	refine("policy[].reject.status", node{"minimum": 400, "maximum": 599})
	refine("policy[].reject", node{"dependentRequired": node{"content_type": []string{"body"}}})
	// validate.go: an empty body is refused, and a content type that is
	// not a header field value (fieldValue: empty, or a control character
	// but HTAB).
	refine("policy[].reject.body", node{"minLength": 1})
	refine("policy[].reject.content_type", node{"pattern": `^[^\x00-\x08\x0a-\x1f\x7f]+$`})

	// Defaults, from defaults.go.
	dur := func(d time.Duration) string {
		switch {
		case d%time.Hour == 0:
			return fmt.Sprintf("%dh", d/time.Hour)
		case d%time.Minute == 0:
			return fmt.Sprintf("%dm", d/time.Minute)
		case d%time.Second == 0:
			return fmt.Sprintf("%ds", d/time.Second)
		}
		return d.String()
	}
	for path, def := range map[string]any{
		"server.listen":                            DefaultListen,
		"server.read_header_timeout":               dur(DefaultReadHeaderTimeout),
		"server.idle_timeout":                      dur(DefaultIdleTimeout),
		"server.shutdown_timeout":                  dur(DefaultShutdownTimeout),
		"server.max_header_bytes":                  DefaultMaxHeaderBytes,
		"server.max_connections":                   0,
		"server.trusted_proxies":                   []string{},
		"server.client_ip_header":                  DefaultClientIPHeader,
		"server.trusted_hops":                      0,
		"server.ipv6_prefix":                       DefaultIPv6Prefix,
		"server.rate_limit_headers":                DefaultRateLimitHeaders,
		"server.ambiguous_key_parts":               DefaultAmbiguousKeyParts,
		"server.underscores_in_headers":            false,
		"server.case_sensitive_paths":              false,
		"server.client_body_timeout":               dur(DefaultClientBodyTimeout),
		"server.send_timeout":                      dur(DefaultSendTimeout),
		"server.proxy_protocol":                    false,
		"server.h2c":                               false,
		"server.http1":                             DefaultHTTP1,
		"server.tls.ca":                            DefaultACMECA,
		"server.tls.storage":                       DefaultACMEStorage,
		"admin.listen":                             DefaultAdminListen,
		"admin.top_keys":                           topKeysValues[0],
		"admin.allowed_hosts":                      []string{},
		"forward_auth.listen":                      "",
		"forward_auth.trusted_senders":             []string{},
		"forward_auth.max_wait":                    dur(DefaultForwardAuthMaxWait),
		"log.level":                                DefaultLogLevel,
		"log.format":                               DefaultLogFormat,
		"log.access":                               DefaultLogAccess,
		"log.access_replay":                        false,
		"log.client_address":                       DefaultClientAddress,
		"admin.key_hash_secret_env":                "",
		"store.backend":                            DefaultBackend,
		"store.max_keys":                           DefaultMaxKeys,
		"store.overrides_file":                     DefaultOverridesFile,
		"store.redis.addrs":                        []string{DefaultRedisAddr},
		"store.redis.db":                           0,
		"store.redis.tls":                          false,
		"store.redis.timeout":                      dur(DefaultRedisTimeout),
		"store.redis.prefix":                       DefaultRedisPrefix,
		"store.redis.on_error":                     DefaultOnError,
		"upstream[].timeout":                       dur(DefaultUpstreamTimeout),
		"upstream[].preserve_host":                 false,
		"upstream[].max_fails":                     DefaultMaxFails,
		"upstream[].fail_timeout":                  dur(DefaultFailTimeout),
		"upstream[].upgrades":                      DefaultUpgrades,
		"upstream[].request_buffering":             DefaultRequestBuffering,
		"upstream[].max_body_bytes":                DefaultMaxBodyBytes,
		"upstream[].min_body_rate":                 DefaultMinBodyRate,
		"upstream[].body_rate_window":              dur(DefaultBodyRateWindow),
		"upstream[].max_streams_per_key":           DefaultMaxStreamsPerKey,
		"upstream[].allow_trace":                   false,
		"upstream[].protocol":                      DefaultUpstreamProtocol,
		"upstream[].transport":                     DefaultTransport,
		"upstream[].concurrency.adaptive":          false,
		"upstream[].concurrency.min_limit":         DefaultMinLimit,
		"upstream[].concurrency.max_limit":         DefaultMaxLimit,
		"upstream[].concurrency.queue":             DefaultConcQueue,
		"upstream[].concurrency.max_wait":          dur(DefaultConcMaxWait),
		"upstream[].concurrency.fair_share":        true,
		"upstream[].concurrency.mode":              Enforce,
		"upstream[].concurrency.classes[].reserve": 0,
		"policy[].mode":                            DefaultMode,
		"policy[].key":                             []string{"ip"},
		"policy[].on_missing":                      DefaultOnMissing,
		"policy[].class":                           DefaultClass,
		"policy[].concurrency.queue":               0,
		"policy[].concurrency.max_wait":            dur(DefaultConcMaxWait),
		"policy[].ban.escalation":                  1,
		"policy[].ban.forget_after":                dur(DefaultBanForget),
		"policy[].ban.status":                      DefaultRejectStatus,
		"policy[].reject.status":                   DefaultRejectStatus,
		"shared_limit[].key":                       []string{"ip"},
		"shared_limit[].on_missing":                MissingShared,
		"shared_limit[].slots":                     DefaultSlots,
		"shared_limit[].cost":                      1,
		"shared_limit[].queue":                     0,
		"shared_limit[].delay":                     0,
		"policy[].limits[].slots":                  DefaultSlots,
		"policy[].limits[].cost":                   1,
		"policy[].limits[].queue":                  0,
		"policy[].limits[].delay":                  0,
		"policy[].limits[].estimate":               1,
		"rlqs.listen":                              "",
		"rlqs.cert_file":                           "",
		"rlqs.key_file":                            "",
		"rlqs.client_ca_file":                      "",
		"rlqs.assignment_ttl":                      "10s",
		"rlqs.max_share":                           DefaultRLQSMaxShare,
		"rlqs.max_buckets":                         DefaultRLQSMaxBuckets,
		"rlqs.max_streams":                         DefaultRLQSMaxStreams,
		"rls.listen":                               "",
		"rls.cert_file":                            "",
		"rls.key_file":                             "",
		"rls.client_ca_file":                       "",
		"rls.max_hits_addend":                      DefaultRLSMaxHitsAddend,
		"rls.max_descriptors":                      DefaultRLSMaxDescriptors,
		"rls.max_entries":                          DefaultRLSMaxEntries,
		"rls.max_message_bytes":                    DefaultRLSMaxMessageBytes,
		"rls.max_concurrent_streams":               DefaultRLSMaxStreams,
		"rls.compatibility":                        DefaultRLSCompatibility,
		"rls.response_headers":                     DefaultRLSResponseHeaders,
		"rls.count_keys":                           DefaultRLSCountKeys,
		"rls.lookup":                               DefaultRLSLookup,
		"rls.expiration_jitter_max":                "0s",
		"rls.limit_header":                         DefaultRLSLimitHeader,
		"rls.remaining_header":                     DefaultRLSRemainingHeader,
		"rls.reset_header":                         DefaultRLSResetHeader,
		"rls.shadow_mode":                          false,
		"rls.quota_mode":                           false,
		"rls.domains":                              []string{},
		"policy[].unlimited":                       false,
		"policy[].quota_mode":                      false,
		"policy[].replaces":                        []string{},
		"identity.leeway":                          dur(DefaultIdentityLeeway),
		"identity.refresh_interval":                dur(DefaultIdentityRefresh),
	} {
		refine(path, node{"default": def})
	}
	refine("rls", node{"dependentRequired": node{"cert_file": []string{"key_file"}, "key_file": []string{"cert_file"}, "client_ca_file": []string{"cert_file"}}})
	refine("rls.max_hits_addend", node{"minimum": 1, "maximum": limiter.MaxCount})
	refine("rls.max_descriptors", node{"minimum": 1, "maximum": 1024})
	refine("rls.max_entries", node{"minimum": 1, "maximum": 64})
	refine("rls.max_message_bytes", node{"minimum": 1024, "maximum": 16 << 20})
	refine("rls.max_concurrent_streams", node{"minimum": 1, "maximum": 1 << 20})
	refine("policy[].match.descriptor", node{"minItems": 1, "maxItems": 64})
	refine("policy[].match.rls_domain", node{"minLength": 1})
	refine("policy[].replaces", node{"items": node{"type": "string", "minLength": 1}})
	// A fixed window's limit may be 0 in an RLS policy (the else above
	// refuses it in any other).
	refine("policy[].limits[].limit", node{"minimum": 0})
	refine("rls.compatibility", node{"enum": compatibilities})
	refine("rls.count_keys", node{"enum": countKeys})
	refine("rls.lookup", node{"enum": lookups})
	refine("rls.response_headers", node{"enum": rlsHeaders})
	refine("rls.limit_header", node{"$ref": "#/$defs/headerName"})
	refine("rls.remaining_header", node{"$ref": "#/$defs/headerName"})
	refine("rls.reset_header", node{"$ref": "#/$defs/headerName"})
	refine("rls.domains", node{"items": node{"type": "string", "minLength": 1}})

	// Descriptions, from docs/configuration.md.
	desc, err := docDescriptions(docs)
	if err != nil {
		return nil, err
	}
	for path, d := range desc {
		if _, ok := w.nodes[path]; !ok {
			errs = append(errs, "docs/configuration.md describes "+path+", which is no key")
			continue
		}
		w.nodes[path]["description"] = d
	}
	for _, path := range w.leaves {
		if _, ok := w.nodes[path]["description"]; !ok {
			errs = append(errs, "docs/configuration.md does not describe "+path)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("schema:\n%s", strings.Join(errs, "\n"))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// refineLimit adds to the limit table at path (a [[shared_limit]] or a
// [[policy.limits]]) what each algorithm takes and requires.
func refineLimit(path string, refine func(string, node)) {
	var algs []string
	var cases []node
	params := []string{"rate", "burst", "limit", "window", "time_zone", "slots", "queue", "max_wait", "delay"}
	for _, a := range limiter.Algorithms() {
		algs = append(algs, a.String())
		then := node{"required": a.Requires()}
		not := node{}
		for _, p := range params {
			if !slices.Contains(a.Takes(), p) {
				not[p] = false
			}
		}
		if slices.Contains(a.Takes(), "window") && !slices.Contains(a.Takes(), "time_zone") {
			// A calendar window is for the algorithms with a time zone.
			not["window"] = node{"$ref": "#/$defs/positiveDuration"}
		}
		switch {
		case a == limiter.SlidingLog:
			not["limit"] = node{"minimum": 1, "maximum": limiter.MaxSlidingLogLimit}
		case a != limiter.FixedWindow && slices.Contains(a.Takes(), "limit"):
			// Only a fixed window's may be 0 (in an RLS policy).
			not["limit"] = node{"minimum": 1}
		}
		then["properties"] = not
		cases = append(cases, node{
			"if":   node{"properties": node{"algorithm": node{"const": a.String()}}, "required": []string{"algorithm"}},
			"then": then,
		})
	}
	refine(path, node{"allOf": cases})
	refine(path+".algorithm", node{"enum": algs})
	refine(path+".key", node{"items": node{"$ref": "#/$defs/keyPart"}})
	refine(path+".on_missing", node{"enum": onMissings})
	refine(path+".burst", node{"minimum": 1, "maximum": limiter.MaxCount})
	refine(path+".limit", node{"minimum": 1, "maximum": limiter.MaxCount})
	refine(path+".window", node{"anyOf": []node{{"$ref": "#/$defs/positiveDuration"}, {"enum": calendarUnits}}})
	refine(path+".time_zone", node{"minLength": 1, "not": node{"const": "Local"}})
	refine(path+".slots", node{"minimum": 1, "maximum": limiter.MaxSlots})
	refine(path+".queue", node{"minimum": 0, "maximum": limiter.MaxQueue})
	refine(path+".delay", node{"minimum": 0, "maximum": limiter.MaxQueue})
	refine(path+".cost", node{"minimum": 1, "maximum": limiter.MaxCount})
}

// docSections maps the tables' headings in docs/configuration.md (a "### "
// heading, or a paragraph that starts with the table's name) to the schema
// path of the table they describe.
var docSections = map[string]string{
	"[server]":               "server",
	"[server.tls]":           "server.tls",
	"[admin]":                "admin",
	"[forward_auth]":         "forward_auth",
	"[log]":                  "log",
	"[store]":                "store",
	"[store.leases]":         "store.leases",
	"[rls]":                  "rls",
	"[rlqs]":                 "rlqs",
	"[identity]":             "identity",
	"[[upstream]]":           "upstream[]",
	"[upstream.concurrency]": "upstream[].concurrency",
	"[[policy]]":             "policy[]",
	"[policy.ban]":           "policy[].ban",
	"[policy.concurrency]":   "policy[].concurrency",
	"[[policy.limits]]":      "policy[].limits[]",
}

// docProse describes the keys that docs/configuration.md explains in its
// prose rather than in a table row, by the path of the table it says is
// theirs; each is still checked to be a key.
var docProse = map[string]string{
	"upstream[].concurrency.classes[].name":    "the class's name, unique; policies name it in class",
	"upstream[].concurrency.classes[].reserve": `the share of the limit only this class may take, a fraction or "N%" from 0 to below 1; all together below 1`,
	"policy[].match.hosts":                     `hosts the request's must be: exact, or "*.example.com" (sub-domains only); compared without port or trailing dot`,
	"policy[].match.methods":                   "methods, in upper case",
	"policy[].match.path":                      "the exact path (canonical form), starting with /",
	"policy[].match.path_prefix":               "a path prefix (canonical form), starting with /",
	"policy[].match.path_regex":                "an RE2 expression the path must match",
	"policy[].match.headers":                   `headers and their exact values; "*" means present`,
	"policy[].match.claims":                    "claims of the verified token ([identity]) by path and their exact values; a missing or invalid token matches none",
	"policy[].limits[].count.status":           `statuses (401) and classes ("5xx") of the answers that count`,
	"policy[].limits[].count.header":           "a response header whose presence marks an answer that counts",
	"policy[].reject.status":                   "the status of a rejection, 400 to 599",
	"policy[].reject.body":                     "a custom body instead of the problem+json one; not empty",
	"policy[].reject.content_type":             `the custom body's Content-Type (default "text/plain; charset=utf-8"); only with body; no control characters`,
	"shared_limit[].name":                      "the shared limit's name, unique; policies use it with shared = \"NAME\"",
}

var (
	mdLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	mdCell   = regexp.MustCompile(`^` + "`" + `([a-z0-9_.]+)` + "`" + `$`)
	mdHeadRE = regexp.MustCompile("^(?:### )?`(\\[\\[?[a-z_.]+\\]\\]?)`")
)

// docDescriptions reads the descriptions of the keys from the tables of
// docs/configuration.md's "Every key" section, keyed by schema path; a
// [[policy.limits]] row describes the same key of a [[shared_limit]].
func docDescriptions(docs []byte) (map[string]string, error) {
	out := map[string]string{}
	_, every, ok := strings.Cut(string(docs), "\n## Every key\n")
	if !ok {
		return nil, fmt.Errorf("docs/configuration.md has no \"## Every key\" section")
	}
	section := ""
	for line := range strings.SplitSeq(every, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		if m := mdHeadRE.FindStringSubmatch(line); m != nil {
			section = docSections[m[1]] // "" for a table this does not read
			continue
		}
		if section == "" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := splitRow(line)
		what := cells[len(cells)-1]
		if what == "" { // [log] level and format: the type says it
			what = cells[1]
		}
		what = strings.ReplaceAll(mdLink.ReplaceAllString(what, "$1"), `\|`, "|")
		for key := range strings.SplitSeq(cells[0], ", ") {
			m := mdCell.FindStringSubmatch(key)
			if m == nil {
				return nil, fmt.Errorf("docs/configuration.md: %q is not a key cell", key)
			}
			path := section + "." + m[1]
			if section == "store" && strings.HasPrefix(m[1], "redis.") {
				path = "store." + m[1]
			}
			out[path] = what
			if section == "policy[].limits[]" {
				out["shared_limit[]."+m[1]] = what
			}
		}
	}
	for path, d := range docProse {
		out[path] = d
	}
	for _, p := range []string{"shared", "count", "cost_from", "estimate", "estimate_from"} {
		delete(out, "shared_limit[]."+p)
	}
	return out, nil
}

// splitRow splits a Markdown table row into its trimmed cells (an escaped
// \| is no separator).
func splitRow(line string) []string {
	var cells []string
	var b strings.Builder
	line = strings.TrimSpace(strings.Trim(strings.TrimSpace(line), "|"))
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			b.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}
