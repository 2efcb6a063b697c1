package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay"
)

// progressEvery is how often replay's progress line is redrawn at most.
const progressEvery = 200 * time.Millisecond

// replayProgress returns what shows a replay's progress on w (lines read,
// lines a second, the share of the logs read) if w is a terminal, and nil
// otherwise: a log of the command's output, or a pipe, gets no progress
// lines.
func replayProgress(w io.Writer) func(replay.Progress) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return progressLine(w, time.Now)
}

// progressLine returns what draws the progress on one line of w, redrawn
// in place (at most every progressEvery) and erased at the end.
func progressLine(w io.Writer, now func() time.Time) func(replay.Progress) {
	var (
		last    time.Time
		printed bool
	)
	return func(p replay.Progress) {
		if p.Done {
			if printed {
				io.WriteString(w, "\r\033[K")
			}
			return
		}
		t := now()
		if printed && t.Sub(last) < progressEvery {
			return
		}
		last, printed = t, true
		line := fmt.Sprintf("\rreplay: %d lines read", p.Lines)
		if s := p.Elapsed.Seconds(); s > 0 {
			line += fmt.Sprintf(", %.0f lines/s", float64(p.Lines)/s)
		}
		if p.Size > 0 {
			line += fmt.Sprintf(", %.0f%% of the logs", 100*float64(min(p.Read, p.Size))/float64(p.Size))
		}
		io.WriteString(w, line+"\033[K")
	}
}
