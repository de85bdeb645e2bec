package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows a bar on stderr for executions that last more than a
// second, when stderr is a terminal and --quiet is not set.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	enabled bool
	start   time.Time
	desc    string
	bar     *progressbar.ProgressBar
}

// barScale turns fractional run counts into bar units.
const barScale = 1000

func newProgress(w io.Writer, quiet bool, desc string) *progress {
	p := &progress{w: w, start: time.Now(), desc: desc}
	if f, ok := w.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		p.enabled = true
	}
	return p
}

// Update implements experiments.Progress.
func (p *progress) Update(done, total float64) {
	if !p.enabled {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		if time.Since(p.start) < time.Second {
			return
		}
		p.bar = progressbar.NewOptions64(int64(total*barScale),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.desc),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionFullWidth(),
		)
	}
	_ = p.bar.Set64(int64(done * barScale))
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
