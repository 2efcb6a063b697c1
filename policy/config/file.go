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
		RLQS     rawRLQS        `toml:"rlqs"`
		Identity *rawIdentity   `toml:"identity"`
		Upstream []rawUpstream  `toml:"upstream"`
		Shared   []rawLimit     `toml:"shared_limit"`
		Policy   []rawPolicy    `toml:"policy"`
	}
	rawServer struct {
		Listen            scalar[string] `toml:"listen"`
		ReadHeaderTimeout durationValue  `toml:"read_header_timeout"`
		IdleTimeout       durationValue  `toml:"idle_timeout"`
		ShutdownTimeout   durationValue  `toml:"shutdown_timeout"`
		MaxHeaderBytes    scalar[int64]  `toml:"max_header_bytes"`
		MaxConnections    scalar[int64]  `toml:"max_connections"`
		TrustedProxies    cidrs          `toml:"trusted_proxies"`
		ClientIPHeader    scalar[string] `toml:"client_ip_header"`
		TrustedHops       scalar[int64]  `toml:"trusted_hops"`
		ProxyProtocolFrom cidrs          `toml:"proxy_protocol_from"`
		IPv6Prefix        scalar[int64]  `toml:"ipv6_prefix"`
		RateLimitHeaders  scalar[string] `toml:"rate_limit_headers"`
		AmbiguousKeyParts scalar[string] `toml:"ambiguous_key_parts"`
		Underscores       scalar[bool]   `toml:"underscores_in_headers"`
		CaseSensitive     scalar[bool]   `toml:"case_sensitive_paths"`
		ClientBodyTimeout durationValue  `toml:"client_body_timeout"`
		SendTimeout       durationValue  `toml:"send_timeout"`
		TempDir           scalar[string] `toml:"temp_dir"`
		RespBudget        scalar[int64]  `toml:"response_buffer_budget"`
		RespDisk          scalar[int64]  `toml:"response_buffer_disk"`
		ProxyProtocol     scalar[bool]   `toml:"proxy_protocol"`
		H2C               scalar[bool]   `toml:"h2c"`
		HTTP1             scalar[string] `toml:"http1"`
		Unmatched         scalar[string] `toml:"unmatched"`
		UnmatchedUpstream scalar[string] `toml:"unmatched_upstream"`
		TLS               *rawTLS        `toml:"tls"`
	}
	rawTLS struct {
		Mode       scalar[string] `toml:"mode"`
		Domains    stringList     `toml:"domains"`
		Email      scalar[string] `toml:"email"`
		CA         scalar[string] `toml:"ca"`
		CARoot     scalar[string] `toml:"ca_root"`
		Storage    scalar[string] `toml:"storage"`
		HTTPListen scalar[string] `toml:"http_listen"`
		CertFile   scalar[string] `toml:"cert_file"`
		KeyFile    scalar[string] `toml:"key_file"`
	}
	rawAdmin struct {
		Listen   scalar[string] `toml:"listen"`
		TokenEnv scalar[string] `toml:"token_env"`
		TopKeys  scalar[string] `toml:"top_keys"`
		Hosts    stringList     `toml:"allowed_hosts"`
		HashEnv  scalar[string] `toml:"key_hash_secret_env"`
	}
	rawForwardAuth struct {
		Listen     scalar[string] `toml:"listen"`
		Senders    cidrs          `toml:"trusted_senders"`
		DenyStatus scalar[int64]  `toml:"deny_status"`
		MaxWait    durationValue  `toml:"max_wait"`
	}
	rawLog struct {
		Level   scalar[string] `toml:"level"`
		Format  scalar[string] `toml:"format"`
		Access  scalar[bool]   `toml:"access"`
		Replay  replayValue    `toml:"access_replay"`
		Client  scalar[string] `toml:"client_address"`
		File    scalar[string] `toml:"file"`
		AccFile scalar[string] `toml:"access_file"`
	}
	rawRLS struct {
		Listen         scalar[string] `toml:"listen"`
		CertFile       scalar[string] `toml:"cert_file"`
		KeyFile        scalar[string] `toml:"key_file"`
		ClientCAFile   scalar[string] `toml:"client_ca_file"`
		MaxHitsAddend  scalar[int64]  `toml:"max_hits_addend"`
		MaxDescriptors scalar[int64]  `toml:"max_descriptors"`
		MaxEntries     scalar[int64]  `toml:"max_entries"`
		MaxMessage     scalar[int64]  `toml:"max_message_bytes"`
		MaxStreams     scalar[int64]  `toml:"max_concurrent_streams"`
		Compatibility  scalar[string] `toml:"compatibility"`
		RespHeaders    scalar[string] `toml:"response_headers"`
		LimitHeader    scalar[string] `toml:"limit_header"`
		RemainHeader   scalar[string] `toml:"remaining_header"`
		ResetHeader    scalar[string] `toml:"reset_header"`
		ShadowMode     scalar[bool]   `toml:"shadow_mode"`
		QuotaMode      scalar[bool]   `toml:"quota_mode"`
		StopIncrement  scalar[bool]   `toml:"stop_increment_when_over_limit"`
		DynMetadata    scalar[bool]   `toml:"dynamic_metadata"`
		CountKeys      scalar[string] `toml:"count_keys"`
		Lookup         scalar[string] `toml:"lookup"`
		ExpJitter      durationValue  `toml:"expiration_jitter_max"`
		Domains        stringList     `toml:"domains"`
	}
	rawRLQS struct {
		Listen        scalar[string] `toml:"listen"`
		CertFile      scalar[string] `toml:"cert_file"`
		KeyFile       scalar[string] `toml:"key_file"`
		ClientCAFile  scalar[string] `toml:"client_ca_file"`
		AssignmentTTL durationValue  `toml:"assignment_ttl"`
		MaxShare      share          `toml:"max_share"`
		MaxBuckets    scalar[int64]  `toml:"max_buckets"`
		MaxStreams    scalar[int64]  `toml:"max_streams"`
	}
	rawIdentity struct {
		JWKSFile   scalar[string] `toml:"jwks_file"`
		JWKSURL    scalar[string] `toml:"jwks_url"`
		SecretEnv  scalar[string] `toml:"secret_env"`
		Algorithms stringList     `toml:"algorithms"`
		Issuer     scalar[string] `toml:"issuer"`
		Audience   stringList     `toml:"audience"`
		Leeway     durationValue  `toml:"leeway"`
		Refresh    durationValue  `toml:"refresh_interval"`
		Header     scalar[string] `toml:"header"`
		Cookie     scalar[string] `toml:"cookie"`
	}
	rawStore struct {
		Backend scalar[string] `toml:"backend"`
		MaxKeys scalar[int64]  `toml:"max_keys"`
		OvFile  scalar[string] `toml:"overrides_file"`
		Redis   rawRedis       `toml:"redis"`
		Leases  rawLeases      `toml:"leases"`
	}
	rawLeases struct {
		LeaseTime durationValue `toml:"lease_time"`
		MaxShare  share         `toml:"max_share"`
		MinLease  scalar[int64] `toml:"min_lease"`
		MaxKeys   scalar[int64] `toml:"max_keys"`
	}
	rawRedis struct {
		Addrs       stringList     `toml:"addrs"`
		MasterName  scalar[string] `toml:"master_name"`
		Username    scalar[string] `toml:"username"`
		PasswordEnv scalar[string] `toml:"password_env"`
		DB          scalar[int64]  `toml:"db"`
		TLS         scalar[bool]   `toml:"tls"`
		Timeout     durationValue  `toml:"timeout"`
		Prefix      scalar[string] `toml:"prefix"`
		OnError     scalar[string] `toml:"on_error"`
	}
	rawUpstream struct {
		Name          scalar[string]  `toml:"name"`
		Targets       stringList      `toml:"targets"`
		Timeout       durationValue   `toml:"timeout"`
		PreserveHost  scalar[bool]    `toml:"preserve_host"`
		MaxFails      scalar[int64]   `toml:"max_fails"`
		FailTimeout   durationValue   `toml:"fail_timeout"`
		Upgrades      stringList      `toml:"upgrades"`
		Buffering     scalar[bool]    `toml:"request_buffering"`
		MaxBodyBytes  scalar[int64]   `toml:"max_body_bytes"`
		MinBodyRate   scalar[int64]   `toml:"min_body_rate"`
		RateWindow    durationValue   `toml:"body_rate_window"`
		MaxStreams    scalar[int64]   `toml:"max_streams_per_key"`
		RespBuffering scalar[bool]    `toml:"response_buffering"`
		RespMemory    scalar[int64]   `toml:"response_buffer_memory"`
		RespFile      scalar[int64]   `toml:"response_buffer_file"`
		AllowTrace    scalar[bool]    `toml:"allow_trace"`
		Protocol      scalar[string]  `toml:"protocol"`
		Transport     scalar[string]  `toml:"transport"`
		Concurrency   *rawConcurrency `toml:"concurrency"`
	}
	rawConcurrency struct {
		Limit     scalar[int64]  `toml:"limit"`
		Adaptive  scalar[bool]   `toml:"adaptive"`
		MinLimit  scalar[int64]  `toml:"min_limit"`
		MaxLimit  scalar[int64]  `toml:"max_limit"`
		Queue     scalar[int64]  `toml:"queue"`
		MaxWait   durationValue  `toml:"max_wait"`
		FairShare scalar[bool]   `toml:"fair_share"`
		Mode      scalar[string] `toml:"mode"`
		Classes   []rawClass     `toml:"classes"`
	}
	rawClass struct {
		Name    scalar[string] `toml:"name"`
		Reserve share          `toml:"reserve"`
	}
	rawPolicy struct {
		Name      scalar[string] `toml:"name"`
		Upstream  scalar[string] `toml:"upstream"`
		Mode      scalar[string] `toml:"mode"`
		Key       stringList     `toml:"key"`
		OnMissing scalar[string] `toml:"on_missing"`
		Match     *rawMatch      `toml:"match"`
		Limits    []rawLimit     `toml:"limits"`
		Reject    *rawReject     `toml:"reject"`
		Conc      *rawPolicyConc `toml:"concurrency"`
		Class     scalar[string] `toml:"class"`
		Ban       *rawBan        `toml:"ban"`
		// An RLS policy's only (docs/envoy.md).
		Unlimited scalar[bool]  `toml:"unlimited"`
		QuotaMode scalar[bool]  `toml:"quota_mode"`
		Replaces  stringList    `toml:"replaces"`
		Metadata  metadataValue `toml:"metadata"`
		ToMetric  stringList    `toml:"value_to_metric"`
	}
	rawPolicyConc struct {
		Limit   scalar[int64] `toml:"limit"`
		Queue   scalar[int64] `toml:"queue"`
		MaxWait durationValue `toml:"max_wait"`
	}
	rawMatch struct {
		Hosts      stringList                `toml:"hosts"`
		Methods    stringList                `toml:"methods"`
		Path       scalar[string]            `toml:"path"`
		PathPrefix scalar[string]            `toml:"path_prefix"`
		PathRegex  scalar[string]            `toml:"path_regex"`
		Headers    map[string]scalar[string] `toml:"headers"`
		Claims     map[string]scalar[string] `toml:"claims"`
		RLSDomain  scalar[string]            `toml:"rls_domain"`
		Descriptor stringList                `toml:"descriptor"`
	}
	rawLimit struct {
		Name      scalar[string] `toml:"name"`   // [[shared_limit]]: its name; [[policy.limits]]: the name in the RateLimit fields
		Shared    scalar[string] `toml:"shared"` // [[policy.limits]] only
		Key       stringList     `toml:"key"`
		OnMissing scalar[string] `toml:"on_missing"`
		Algorithm scalar[string] `toml:"algorithm"`
		Rate      rateValue      `toml:"rate"`
		Burst     scalar[int64]  `toml:"burst"`
		Limit     scalar[int64]  `toml:"limit"`
		Window    windowValue    `toml:"window"`
		TimeZone  zoneValue      `toml:"time_zone"`
		Slots     scalar[int64]  `toml:"slots"`
		Queue     scalar[int64]  `toml:"queue"`
		MaxWait   durationValue  `toml:"max_wait"`
		Delay     scalar[int64]  `toml:"delay"`
		Cost      scalar[int64]  `toml:"cost"`
		Accuracy  scalar[string] `toml:"accuracy"`
		// Charged after the answer ([[policy.limits]] only).
		Count        *rawCount      `toml:"count"`
		CostFrom     scalar[string] `toml:"cost_from"`
		Estimate     scalar[int64]  `toml:"estimate"`
		EstimateFrom scalar[string] `toml:"estimate_from"`
	}
	rawCount struct {
		Status statuses       `toml:"status"`
		Header scalar[string] `toml:"header"`
	}
	rawBan struct {
		Duration    durationValue  `toml:"duration"`
		Escalation  scalar[int64]  `toml:"escalation"`
		MaxDuration durationValue  `toml:"max_duration"`
		ForgetAfter durationValue  `toml:"forget_after"`
		Status      scalar[int64]  `toml:"status"`
		Mode        scalar[string] `toml:"mode"`
	}
	rawReject struct {
		Status      scalar[int64]  `toml:"status"`
		Body        scalar[string] `toml:"body"`
		ContentType scalar[string] `toml:"content_type"`
	}
)

// Error is one problem in a configuration file. Line and Col are 0 when the
// position is unknown; Key is the TOML key path, e.g.
// "policy[2].limits[0].rate"; Policy is the name of the policy the key is
// under, when it is under a policy that has one.
type Error struct {
	File      string
	Line, Col int
	Key       string
	Policy    string
	Msg       string
}

// Error returns "file:line:col: key: message" (or "file: key: message"
// when the position is unknown), as `limitproxy check` prints it; a key
// under a named policy is written with its name, `policy "login"
// limits[0].rate`, rather than its index.
func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Col)
	}
	if e.Key == "" {
		return where + ": " + e.Msg
	}
	return where + ": " + e.displayKey() + ": " + e.Msg
}

// displayKey is Key as Error writes it.
func (e *Error) displayKey() string {
	if e.Policy == "" {
		return e.Key
	}
	rest, ok := strings.CutPrefix(e.Key, "policy[")
	if !ok {
		return e.Key
	}
	_, rest, _ = strings.Cut(rest, "]")
	rest = strings.TrimPrefix(rest, ".")
	name := "policy " + strconv.Quote(e.Policy)
	if rest == "" {
		return name
	}
	return name + " " + rest
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
		if len(k) > 2 && k[0] == "policy" && k[1] == "metadata" {
			// An RLS policy's metadata holds any keys (metadataValue);
			// the decoder lists those of tables in its arrays.
			continue
		}
		name := k[len(k)-1]
		if near := suggestKey(k[:len(k)-1], name); near != "" {
			c.add(undecodedPath(k, c.at, taken), "unknown key %q (did you mean %q?)", name, near)
			continue
		}
		c.add(undecodedPath(k, c.at, taken), "unknown key %q", name)
	}
	walkValues(reflect.ValueOf(&raw).Elem(), "", c)
	cfg := validate(&raw, c, o)
	namePolicies(c.errs, &raw)
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
