package server

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy/config"
)

// watchJWKS returns the work of watching the [identity] jwks_file of the
// configuration in force: each change reloads the configuration (trigger
// "jwks"), which reads the keys again, so that keys rotated in the file
// come into force without a reload, as a change of the config file does.
// When a reload names another file (or none), the watch follows it. The
// first file is watched from now on, before serve reports ready. nil
// without a config file to reload.
func (p *process) watchJWKS() func(ctx context.Context) {
	if p.path == "" {
		return nil
	}
	// The channel first: a configuration applied after it is taken is
	// one the loop sees.
	applied := p.reload.applied()
	path := jwksFile(p.reload.Status().Config)
	w := p.newJWKSWatcher(path)
	return func(ctx context.Context) {
		for {
			stop := runWatcher(ctx, w)
			for path == jwksFile(p.reload.Status().Config) {
				select {
				case <-ctx.Done():
					stop()
					return
				case <-applied:
					applied = p.reload.applied()
				}
			}
			stop()
			applied = p.reload.applied()
			path = jwksFile(p.reload.Status().Config)
			w = p.newJWKSWatcher(path)
		}
	}
}

// newJWKSWatcher starts watching the JWKS file at path, reloading on each
// change once run; nil for no path, or a file that cannot be watched
// (logged).
func (p *process) newJWKSWatcher(path string) *config.Watcher {
	if path == "" {
		return nil
	}
	w, err := config.NewWatcher(path, 0, p.log, func() { p.reload.reload("jwks") })
	if err != nil {
		p.log.Error("cannot watch the JWKS file; reload with SIGHUP or the admin API after changing it", zap.String("file", path), zap.Error(err))
		return nil
	}
	return w
}

// runWatcher runs w (nil: none) until the returned stop is called.
func runWatcher(ctx context.Context, w *config.Watcher) (stop func()) {
	if w == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(wctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// jwksFile returns cfg's [identity] jwks_file; "" for none.
func jwksFile(cfg *config.Config) string {
	if cfg == nil || cfg.Identity == nil {
		return ""
	}
	return cfg.Identity.JWKSFile
}
