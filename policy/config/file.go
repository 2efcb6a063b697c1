package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/limitproxy/limitproxy/limiter"
)

// The raw shape of a configuration file (docs/configuration.md), as decoded. Every leaf is
// one of the value types of types.go, so decoding never stops at a bad
// value; validate.go turns this into a Config.
type (
	rawFile struct {
		Server   rawServer      `toml:"server"`
		Admin    rawAdmin       `toml:"admin"`
		FwdAuth  rawForwardAuth `toml:"forward_auth"`
		Log      rawLog         `toml:"log"`
		Store    rawStore       `toml:"store"`
		RLS      rawRLS         `toml:"rls"`
		Upstream []rawUpstream  `toml:"upstream"`
		Shared   []rawLimit     `toml:"shared_limit"`
		Policy   []rawPolicy    `toml:"policy"`
	}
	rawServer struct {
		Listen            Value[string] `toml:"listen"`
		ReadHeaderTimeout Duration      `toml:"read_header_timeout"`
		IdleTimeout       Duration      `toml:"idle_timeout"`
		ShutdownTimeout   Duration      `toml:"shutdown_timeout"`
		MaxHeaderBytes    Value[int64]  `toml:"max_header_bytes"`
		MaxConnections    Value[int64]  `toml:"max_connections"`
		TrustedProxies    cidrs         `toml:"trusted_proxies"`
		ClientIPHeader    Value[string] `toml:"client_ip_header"`
		TrustedHops       Value[int64]  `toml:"trusted_hops"`
		ProxyProtocolFrom cidrs         `toml:"proxy_protocol_from"`
		IPv6Prefix        Value[int64]  `toml:"ipv6_prefix"`
		RateLimitHeaders  Value[string] `toml:"rate_limit_headers"`
		AmbiguousKeyParts Value[string] `toml:"ambiguous_key_parts"`
		Underscores       Value[bool]   `toml:"underscores_in_headers"`
		CaseSensitive     Value[bool]   `toml:"case_sensitive_paths"`
		ClientBodyTimeout Duration      `toml:"client_body_timeout"`
		SendTimeout       Duration      `toml:"send_timeout"`
		TempDir           Value[string] `toml:"temp_dir"`
		RespBudget        Value[int64]  `toml:"response_buffer_budget"`
		RespDisk          Value[int64]  `toml:"response_buffer_disk"`
		ProxyProtocol     Value[bool]   `toml:"proxy_protocol"`
		H2C               Value[bool]   `toml:"h2c"`
		HTTP1             Value[string] `toml:"http1"`
		TLS               *rawTLS       `toml:"tls"`
	}
	rawTLS struct {
		Mode       Value[string] `toml:"mode"`
		Domains    Strings       `toml:"domains"`
		Email      Value[string] `toml:"email"`
		CA         Value[string] `toml:"ca"`
		CARoot     Value[string] `toml:"ca_root"`
		Storage    Value[string] `toml:"storage"`
		HTTPListen Value[string] `toml:"http_listen"`
		CertFile   Value[string] `toml:"cert_file"`
		KeyFile    Value[string] `toml:"key_file"`
	}
	rawAdmin struct {
		Listen   Value[string] `toml:"listen"`
		TokenEnv Value[string] `toml:"token_env"`
		TopKeys  Value[string] `toml:"top_keys"`
		Hosts    Strings       `toml:"allowed_hosts"`
		HashEnv  Value[string] `toml:"key_hash_secret_env"`
	}
	rawForwardAuth struct {
		Listen     Value[string] `toml:"listen"`
		Senders    cidrs         `toml:"trusted_senders"`
		DenyStatus Value[int64]  `toml:"deny_status"`
		MaxWait    Duration      `toml:"max_wait"`
	}
	rawLog struct {
		Level  Value[string] `toml:"level"`
		Format Value[string] `toml:"format"`
		Access Value[bool]   `toml:"access"`
		Replay Value[bool]   `toml:"access_replay"`
		Client Value[string] `toml:"client_address"`
	}
	rawRLS struct {
		Listen         Value[string] `toml:"listen"`
		CertFile       Value[string] `toml:"cert_file"`
		KeyFile        Value[string] `toml:"key_file"`
		ClientCAFile   Value[string] `toml:"client_ca_file"`
		MaxHitsAddend  Value[int64]  `toml:"max_hits_addend"`
		MaxDescriptors Value[int64]  `toml:"max_descriptors"`
		MaxEntries     Value[int64]  `toml:"max_entries"`
		MaxMessage     Value[int64]  `toml:"max_message_bytes"`
		MaxStreams     Value[int64]  `toml:"max_concurrent_streams"`
	}
	rawStore struct {
		Backend Value[string] `toml:"backend"`
		MaxKeys Value[int64]  `toml:"max_keys"`
		OvFile  Value[string] `toml:"overrides_file"`
		Redis   rawRedis      `toml:"redis"`
	}
	rawRedis struct {
		Addrs       Strings       `toml:"addrs"`
		MasterName  Value[string] `toml:"master_name"`
		Username    Value[string] `toml:"username"`
		PasswordEnv Value[string] `toml:"password_env"`
		DB          Value[int64]  `toml:"db"`
		TLS         Value[bool]   `toml:"tls"`
		Timeout     Duration      `toml:"timeout"`
		Prefix      Value[string] `toml:"prefix"`
		OnError     Value[string] `toml:"on_error"`
	}
	rawUpstream struct {
		Name          Value[string]   `toml:"name"`
		Targets       Strings         `toml:"targets"`
		Timeout       Duration        `toml:"timeout"`
		PreserveHost  Value[bool]     `toml:"preserve_host"`
		MaxFails      Value[int64]    `toml:"max_fails"`
		FailTimeout   Duration        `toml:"fail_timeout"`
		Upgrades      Strings         `toml:"upgrades"`
		Buffering     Value[bool]     `toml:"request_buffering"`
		MaxBodyBytes  Value[int64]    `toml:"max_body_bytes"`
		MinBodyRate   Value[int64]    `toml:"min_body_rate"`
		RateWindow    Duration        `toml:"body_rate_window"`
		MaxStreams    Value[int64]    `toml:"max_streams_per_key"`
		RespBuffering Value[bool]     `toml:"response_buffering"`
		RespMemory    Value[int64]    `toml:"response_buffer_memory"`
		RespFile      Value[int64]    `toml:"response_buffer_file"`
		AllowTrace    Value[bool]     `toml:"allow_trace"`
		Protocol      Value[string]   `toml:"protocol"`
		Transport     Value[string]   `toml:"transport"`
		Concurrency   *rawConcurrency `toml:"concurrency"`
	}
	rawConcurrency struct {
		Limit     Value[int64]  `toml:"limit"`
		Adaptive  Value[bool]   `toml:"adaptive"`
		MinLimit  Value[int64]  `toml:"min_limit"`
		MaxLimit  Value[int64]  `toml:"max_limit"`
		Queue     Value[int64]  `toml:"queue"`
		MaxWait   Duration      `toml:"max_wait"`
		FairShare Value[bool]   `toml:"fair_share"`
		Mode      Value[string] `toml:"mode"`
		Classes   []rawClass    `toml:"classes"`
	}
	rawClass struct {
		Name    Value[string] `toml:"name"`
		Reserve share         `toml:"reserve"`
	}
	rawPolicy struct {
		Name      Value[string]  `toml:"name"`
		Upstream  Value[string]  `toml:"upstream"`
		Mode      Value[string]  `toml:"mode"`
		Key       Strings        `toml:"key"`
		OnMissing Value[string]  `toml:"on_missing"`
		Match     *rawMatch      `toml:"match"`
		Limits    []rawLimit     `toml:"limits"`
		Reject    *rawReject     `toml:"reject"`
		Conc      *rawPolicyConc `toml:"concurrency"`
		Class     Value[string]  `toml:"class"`
		Ban       *rawBan        `toml:"ban"`
	}
	rawPolicyConc struct {
		Limit   Value[int64] `toml:"limit"`
		Queue   Value[int64] `toml:"queue"`
		MaxWait Duration     `toml:"max_wait"`
	}
	rawMatch struct {
		Hosts      Strings                  `toml:"hosts"`
		Methods    Strings                  `toml:"methods"`
		Path       Value[string]            `toml:"path"`
		PathPrefix Value[string]            `toml:"path_prefix"`
		PathRegex  Value[string]            `toml:"path_regex"`
		Headers    map[string]Value[string] `toml:"headers"`
		RLSDomain  Value[string]            `toml:"rls_domain"`
		Descriptor Strings                  `toml:"descriptor"`
	}
	rawLimit struct {
		Name      Value[string] `toml:"name"`   // [[shared_limit]]: its name; [[policy.limits]]: the name in the RateLimit fields
		Shared    Value[string] `toml:"shared"` // [[policy.limits]] only
		Key       Strings       `toml:"key"`
		OnMissing Value[string] `toml:"on_missing"`
		Algorithm Value[string] `toml:"algorithm"`
		Rate      rateValue     `toml:"rate"`
		Burst     Value[int64]  `toml:"burst"`
		Limit     Value[int64]  `toml:"limit"`
		Window    Duration      `toml:"window"`
		Slots     Value[int64]  `toml:"slots"`
		Queue     Value[int64]  `toml:"queue"`
		MaxWait   Duration      `toml:"max_wait"`
		Delay     Value[int64]  `toml:"delay"`
		Cost      Value[int64]  `toml:"cost"`
		// Charged after the answer ([[policy.limits]] only).
		Count        *rawCount     `toml:"count"`
		CostFrom     Value[string] `toml:"cost_from"`
		Estimate     Value[int64]  `toml:"estimate"`
		EstimateFrom Value[string] `toml:"estimate_from"`
	}
	rawCount struct {
		Status statuses      `toml:"status"`
		Header Value[string] `toml:"header"`
	}
	rawBan struct {
		Duration    Duration      `toml:"duration"`
		Escalation  Value[int64]  `toml:"escalation"`
		MaxDuration Duration      `toml:"max_duration"`
		ForgetAfter Duration      `toml:"forget_after"`
		Status      Value[int64]  `toml:"status"`
		Mode        Value[string] `toml:"mode"`
	}
	rawReject struct {
		Status      Value[int64]  `toml:"status"`
		Body        Value[string] `toml:"body"`
		ContentType Value[string] `toml:"content_type"`
	}
)

// Error is one problem in a configuration file. Line and Col are 0 when the
// position is unknown; Key is the TOML key path, e.g.
// "policy[2].limits[0].rate".
type Error struct {
	File      string
	Line, Col int
	Key       string
	Msg       string
}

// Error returns "file:line:col: key: message" (or "file: key: message"
// when the position is unknown), as `limitproxy check` prints it.
func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Col)
	}
	if e.Key == "" {
		return where + ": " + e.Msg
	}
	return where + ": " + e.Key + ": " + e.Msg
}

// Errors is every problem found in one file, in file order. Its Error
// method prints one per line, as `limitproxy check` shows them.
type Errors []*Error

// Error returns every error, one per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// collector gathers errors with their positions.
type collector struct {
	file string
	at   map[string]pos
	errs Errors
}

// add records an error at key path key (located if the scanner found it,
// else at the nearest enclosing table it found).
func (c *collector) add(key, format string, args ...any) {
	e := &Error{File: c.file, Key: key, Msg: fmt.Sprintf(format, args...)}
	for k := key; k != ""; k = parentPath(k) {
		if p, ok := c.at[k]; ok {
			e.Line, e.Col = p.line, p.col
			break
		}
	}
	c.errs = append(c.errs, e)
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool {
		a, b := c.errs[i], c.errs[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
	})
	return c.errs
}

// parentPath strips the last element of a key path: "a[1].b" → "a[1]",
// "a[1]" → "a".
func parentPath(k string) string {
	if strings.HasSuffix(k, "]") {
		if i := strings.LastIndex(k, "["); i >= 0 {
			return k[:i]
		}
	}
	if i := strings.LastIndex(k, "."); i >= 0 {
		return k[:i]
	}
	return ""
}

// Options are what a caller adds to the checks of a file.
type Options struct {
	// StoreChecks are the checks a store backend makes of every limit of
	// a file that selects it (the Redis store's arithmetic has bounds the
	// memory store's has not). The caller that knows the stores passes
	// them; an error of type *limiter.ParamError is reported at the key it
	// names. nil: none.
	StoreChecks map[Backend]func(limiter.Limit) error
	// Partial: when the file decodes but does not validate, ParseWith
	// returns the Config validated so far beside the Errors (a value that
	// failed holds its zero value or default), so that a caller such as
	// `limitproxy check` can go on to check what the rest would open and
	// report it all at once. Such a Config must never be served. A file
	// that does not decode (TOML syntax, size, nesting) still gives nil.
	Partial bool
}

// Load reads and validates the configuration file at path, with no store
// checks; see LoadWith.
func Load(path string) (*Config, error) { return LoadWith(path, Options{}) }

// LoadWith reads and validates the configuration file at path. It reads
// only a regular file (or a link to one) of at most MaxFileBytes, and gives
// up after a few seconds, so that whatever is saved at path, a reload
// cannot hang or exhaust memory.
func LoadWith(path string, o Options) (*Config, error) {
	src, err := readConfigFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	return ParseWith(path, src, o)
}

// Parse decodes and validates a configuration. name is used in error
// messages. On failure the error is Errors, holding every problem found:
// a TOML syntax error (one, where the decoder stopped), or every unknown
// key, bad value and inconsistency of the file.
func Parse(name string, src []byte) (*Config, error) { return ParseWith(name, src, Options{}) }

// ParseWith is Parse with the checks of o.
func ParseWith(name string, src []byte, o Options) (*Config, error) {
	if len(src) > MaxFileBytes {
		return nil, Errors{{File: name, Msg: tooLarge(int64(len(src))).Error()}}
	}
	if line, col, ok := checkNesting(src); !ok {
		return nil, Errors{{File: name, Line: line, Col: col, Msg: fmt.Sprintf("nesting deeper than %d levels", MaxDepth)}}
	}
	var raw rawFile
	md, err := toml.Decode(string(src), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, Errors{{File: name, Line: pe.Position.Line, Col: pe.Position.Col, Msg: strings.TrimPrefix(pe.Message, "toml: ")}}
		}
		return nil, Errors{{File: name, Msg: err.Error()}}
	}
	c := &collector{file: name, at: locate(string(src))}
	taken := map[string]bool{}
	for _, k := range md.Undecoded() {
		c.add(undecodedPath(k, c.at, taken), "unknown key %q", k[len(k)-1])
	}
	walkValues(reflect.ValueOf(&raw).Elem(), "", c)
	cfg := validate(&raw, c, o)
	if err := c.err(); err != nil {
		if o.Partial {
			cfg.File, cfg.at = name, c.at
			return cfg, err
		}
		return nil, err
	}
	sum := sha256.Sum256(src)
	cfg.File, cfg.Hash, cfg.at = name, hex.EncodeToString(sum[:]), c.at
	return cfg, nil
}

// undecodedPath finds the concrete path (with array indices, which toml.Key
// lacks) of an unknown key among the located ones: the first in file order
// not already taken by another unknown key of the same name.
func undecodedPath(k toml.Key, at map[string]pos, taken map[string]bool) string {
	want := strings.Join(k, ".")
	best, bestPos := want, pos{}
	for path, p := range at {
		if stripIndices(path) == want && !taken[path] && (bestPos.line == 0 || p.line < bestPos.line) {
			best, bestPos = path, p
		}
	}
	taken[best] = true
	return best
}

func stripIndices(p string) string {
	var b strings.Builder
	skip := false
	for _, r := range p {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// walkValues reports the error each decoded value recorded, at its path.
func walkValues(v reflect.Value, path string, c *collector) {
	if v.CanAddr() {
		if err := valueError(v.Addr().Interface()); err != nil {
			c.add(path, "%v", err)
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkValues(v.Elem(), path, c)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if tag := t.Field(i).Tag.Get("toml"); tag != "" {
				walkValues(v.Field(i), join(path, tag), c)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkValues(v.Index(i), path+"["+strconv.Itoa(i)+"]", c)
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			walkValues(e, join(path, k.String()), c)
		}
	}
}
