package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/limitproxy/limitproxy/policy/config"
)

// reload asks the server running the configuration at path to read its
// file again (POST /api/v1/reload on the admin listener the file names,
// with the token of its token_env) and prints the outcome: applied, with
// the settings left for a restart, or refused, with every error, which
// makes the exit status 1. A file that does not load still names its admin
// listener as a rule (its [admin] table is read alone): the server is asked
// all the same, and its answer, not this command's reading, is reported.
func reload(ctx context.Context, path string, timeout time.Duration, stdout io.Writer) error {
	listen, tokenEnv, err := adminOf(path)
	if err != nil {
		return err
	}
	base, err := adminBase(listen)
	if err != nil {
		return fmt.Errorf("%s: %w (reload the server with SIGHUP instead)", path, err)
	}
	token := ""
	if tokenEnv != "" {
		if token = os.Getenv(tokenEnv); token == "" {
			return fmt.Errorf("%s: admin.token_env: environment variable %s is empty or unset; the admin API needs its token", path, tokenEnv)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/reload", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("reload: nothing listens on %s, the [admin] listen of %s: is limitproxy running with this file? (%w)", listen, path, err)
	}
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var answer struct {
		Applied         bool     `json:"applied"`
		Hash            string   `json:"hash"`
		RequiresRestart []string `json:"requires_restart"`
		Errors          []struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &answer) != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnprocessableEntity {
		return fmt.Errorf("reload: %s answered %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	}
	if !answer.Applied {
		lines := make([]string, 0, len(answer.Errors)+1)
		for _, e := range answer.Errors {
			lines = append(lines, cmp(e.Error, e.Message))
		}
		lines = append(lines, "reload refused: the configuration in force stays")
		return errors.New(strings.Join(lines, "\n"))
	}
	hash := answer.Hash
	if len(hash) > 12 {
		hash = hash[:12]
	}
	fmt.Fprintf(stdout, "reload applied: hash %s\n", hash)
	if len(answer.RequiresRestart) > 0 {
		fmt.Fprintf(stdout, "not applied until a restart: %s\n", strings.Join(answer.RequiresRestart, ", "))
	}
	return nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// adminOf returns the admin listener and token_env of the file at path.
// A file that does not validate is read for its [admin] table alone, with
// the default listener; one that is not TOML returns its errors.
func adminOf(path string) (listen, tokenEnv string, err error) {
	cfg, err := config.Load(path)
	if err == nil {
		return cfg.Admin.Listen, cfg.Admin.TokenEnv, nil
	}
	if fi, serr := os.Stat(path); serr != nil || !fi.Mode().IsRegular() || fi.Size() > config.MaxFileBytes {
		return "", "", err // not read at all: nothing more to learn from it
	}
	src, rerr := os.ReadFile(path)
	if rerr != nil {
		return "", "", err
	}
	var raw struct {
		Admin struct {
			Listen   *string `toml:"listen"`
			TokenEnv string  `toml:"token_env"`
		} `toml:"admin"`
	}
	if _, derr := toml.Decode(string(src), &raw); derr != nil {
		return "", "", err
	}
	listen = config.DefaultAdminListen
	if raw.Admin.Listen != nil {
		listen = *raw.Admin.Listen
	}
	return listen, raw.Admin.TokenEnv, nil
}
