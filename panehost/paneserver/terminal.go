package paneserver

import (
	"io"
	"strings"
	"sync"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"

	"github.com/fleetd/fleetd/herdr"
)

const (
	// defaultRecentLines is what recent reads return when no count is asked
	// for, as in herdr.
	defaultRecentLines = 80
	// maxReadLines caps any read, as in herdr.
	maxReadLines = 1000
)

// terminal is what a pane shows: a terminal emulator fed with the pane's
// output, plus a transcript of logical lines for unwrapped reads.
type terminal struct {
	mu         sync.Mutex
	emu        *vt.Emulator
	transcript *transcript
	revision   uint64
	title      string
	// bracketedPaste and cursorKeys track modes the program switched on;
	// they decide how typed text and arrow keys are encoded.
	bracketedPaste bool
	cursorKeys     bool
}

func newTerminal(cols, rows, scrollback int) *terminal {
	t := &terminal{
		emu:        vt.NewEmulator(cols, rows),
		transcript: newTranscript(scrollback),
	}
	t.emu.SetScrollbackSize(scrollback)
	// Callbacks run inside emu.Write, with t.mu held.
	t.emu.SetCallbacks(vt.Callbacks{
		EnableMode:  func(m ansi.Mode) { t.setMode(m, true) },
		DisableMode: func(m ansi.Mode) { t.setMode(m, false) },
		Title:       func(title string) { t.title = title },
	})
	return t
}

func (t *terminal) setMode(m ansi.Mode, on bool) {
	switch m {
	case ansi.ModeBracketedPaste:
		t.bracketedPaste = on
	case ansi.ModeCursorKeys:
		t.cursorKeys = on
	}
}

// feed takes output of the pane's program.
func (t *terminal) feed(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = t.emu.Write(p)
	t.transcript.write(p)
	t.revision++
}

// replies is what the emulator answers to the program's queries (cursor
// position, device attributes); it must be drained into the pane's input or
// the emulator blocks.
func (t *terminal) replies() io.Reader {
	return t.emu
}

// close ends the replies stream. It closes the pipe's writer rather than the
// emulator so that no emulator field is written while replies are read.
func (t *terminal) close() {
	if w, ok := t.emu.InputPipe().(io.Closer); ok {
		_ = w.Close()
	}
}

type inputModes struct {
	bracketedPaste bool
	cursorKeys     bool
}

func (t *terminal) modes() inputModes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return inputModes{bracketedPaste: t.bracketedPaste, cursorKeys: t.cursorKeys}
}

func (t *terminal) currentRevision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.revision
}

func (t *terminal) currentTitle() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.title
}

// snapshot is text read from the terminal.
type snapshot struct {
	text      string
	revision  uint64
	truncated bool
}

// read returns the text of a source. lines nil means the source's default.
func (t *terminal) read(source herdr.ReadSource, lines *int) snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()

	var rows []string
	limit := lines
	switch source {
	case herdr.ReadSourceRecent, herdr.ReadSourceRecentUnwrapped:
		if limit == nil {
			n := defaultRecentLines
			limit = &n
		}
		if source == herdr.ReadSourceRecent {
			rows = t.recentRows()
		} else {
			rows = t.transcript.lines()
		}
	default:
		rows = t.visibleRows()
	}
	text, truncated := lastLines(trimTrailingBlank(rows), limit)
	return snapshot{text: text, revision: t.revision, truncated: truncated}
}

// visibleRows are the screen's rows, right-trimmed.
func (t *terminal) visibleRows() []string {
	return strings.Split(t.emu.String(), "\n")
}

// recentRows are the scrollback's rows followed by the screen's.
func (t *terminal) recentRows() []string {
	var rows []string
	if sb := t.emu.Scrollback(); sb != nil {
		for _, line := range sb.Lines() {
			rows = append(rows, strings.TrimRight(line.String(), " "))
		}
	}
	return append(rows, t.visibleRows()...)
}

func trimTrailingBlank(rows []string) []string {
	for len(rows) > 0 && strings.TrimSpace(rows[len(rows)-1]) == "" {
		rows = rows[:len(rows)-1]
	}
	return rows
}

// lastLines joins the last limit rows, capped at maxReadLines.
func lastLines(rows []string, limit *int) (string, bool) {
	n := len(rows)
	if limit != nil {
		n = min(n, *limit)
	}
	n = min(n, maxReadLines)
	return strings.Join(rows[len(rows)-n:], "\n"), n < len(rows)
}

// transcript keeps the most recent logical lines of output: text between
// newlines, with carriage returns, backspaces and erase-in-line applied so a
// shell's line editing leaves the line as it was submitted. Escape sequences
// are parsed by the ansi package; only those that edit the current line are
// interpreted.
type transcript struct {
	parser *ansi.Parser
	max    int
	done   []string
	line   []rune
	col    int
}

func newTranscript(max int) *transcript {
	t := &transcript{max: max}
	t.parser = ansi.NewParser()
	t.parser.SetHandler(ansi.Handler{
		Print:     t.print,
		Execute:   t.execute,
		HandleCsi: t.csi,
	})
	return t
}

func (t *transcript) write(p []byte) {
	for _, b := range p {
		t.parser.Advance(b)
	}
}

// lines returns the completed lines and the current one.
func (t *transcript) lines() []string {
	return append(t.done[:len(t.done):len(t.done)], string(t.line))
}

func (t *transcript) print(r rune) {
	for len(t.line) < t.col {
		t.line = append(t.line, ' ')
	}
	if t.col < len(t.line) {
		t.line[t.col] = r
	} else {
		t.line = append(t.line, r)
	}
	t.col++
}

func (t *transcript) execute(b byte) {
	switch b {
	case '\n':
		t.done = append(t.done, strings.TrimRight(string(t.line), " "))
		t.line, t.col = t.line[:0], 0
		// Trimming in batches keeps appends amortised O(1).
		if len(t.done) > 2*t.max {
			t.done = append([]string(nil), t.done[len(t.done)-t.max:]...)
		}
	case '\r':
		t.col = 0
	case '\b':
		t.col = max(0, t.col-1)
	case '\t':
		t.col = (t.col/8 + 1) * 8
	}
}

func (t *transcript) csi(cmd ansi.Cmd, params ansi.Params) {
	if cmd.Prefix() != 0 || cmd.Intermediate() != 0 {
		return
	}
	n, _, _ := params.Param(0, 0)
	switch cmd.Final() {
	case 'K': // erase in line
		switch n {
		case 0:
			t.line = t.line[:min(t.col, len(t.line))]
		case 1:
			for i := 0; i < min(t.col+1, len(t.line)); i++ {
				t.line[i] = ' '
			}
		case 2:
			t.line = t.line[:0]
		}
	case 'C': // cursor forward
		t.col += max(1, n)
	case 'D': // cursor back
		t.col = max(0, t.col-max(1, n))
	case 'G': // cursor to column
		t.col = max(1, n) - 1
	}
}
