package server

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.uber.org/zap"
)

// logFile is a log destination appended to a file that can be reopened
// by name, so that a rotation tool (logrotate) can move the file away and
// have the next lines go to a new one at its name: nginx's USR1. Safe for
// concurrent use; each Write is one write(2) of the file, under a lock.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// openLogFile opens the file at path for appending, creating it (0640)
// if it does not exist.
func openLogFile(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f}, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// Sync does nothing: every Write is already in the file (the kernel's),
// and an fsync per flush would cost a disk's latency.
func (l *logFile) Sync() error { return nil }

// reopen opens the file at its path again and writes there from now on,
// closing the one it wrote to. If the path cannot be opened, it keeps
// writing where it did and returns why.
func (l *logFile) reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	return old.Close()
}

func (l *logFile) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// reopenLogs reopens every log file of p ([log] file, access_file): what
// SIGUSR1 asks. The access lines queued are written out first, to the
// file they were meant for. It returns the files that could not be
// reopened, joined; each of those keeps its old file.
func (p *process) reopenLogs() error {
	if p.access != nil {
		p.access.flush()
	}
	var errs []error
	for _, f := range p.logFiles {
		if err := f.reopen(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchReopen returns the work of reopening the log files on each
// SIGUSR1 until ctx is done (the signal is caught from now on), logging
// the outcome; nil when the logs go to stderr.
func (p *process) watchReopen() func(ctx context.Context) {
	if len(p.logFiles) == 0 {
		return nil
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	p.onClose(func() { signal.Stop(usr1) })
	return func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				if err := p.reopenLogs(); err != nil {
					p.log.Error("cannot reopen a log file; writing on to the one open", zap.Error(err))
					continue
				}
				p.log.Info("log files reopened", zap.Strings("files", p.logPaths()))
			}
		}
	}
}

// logPaths names p's log files.
func (p *process) logPaths() []string {
	var out []string
	for _, f := range p.logFiles {
		out = append(out, f.path)
	}
	return out
}
