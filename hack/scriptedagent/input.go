package main

import (
	"unicode/utf8"
)

// Control bytes and sequences the assembler reacts to.
const (
	keyCtrlC     = 0x03
	keyCtrlD     = 0x04
	keyBackspace = 0x08
	keyTab       = 0x09
	keyLF        = 0x0a
	keyCR        = 0x0d
	keyEsc       = 0x1b
	keyDelete    = 0x7f

	// pasteStart and pasteEnd are the CSI parameters that bracket a paste
	// once the application enabled mode 2004.
	pasteStart = "[200~"
	pasteEnd   = "[201~"

	// maxEscapeLen bounds an escape sequence, so that a stray ESC cannot
	// swallow the input that follows it.
	maxEscapeLen = 32
)

// inputKind says what ended a call to lineAssembler.feed.
type inputKind int

const (
	// inputNone means the data was consumed and no event happened.
	inputNone inputKind = iota
	// inputSubmit means Enter was pressed outside a paste.
	inputSubmit
	// inputInterrupt means Ctrl-C was pressed outside a paste.
	inputInterrupt
	// inputEOF means Ctrl-D was pressed on an empty line.
	inputEOF
)

// inputEvent is what the person or herdr did at the keyboard.
type inputEvent struct {
	// Kind is what happened.
	Kind inputKind
	// Text is the submitted prompt, for inputSubmit.
	Text string
}

// lineAssembler turns the bytes typed into the pane into prompts. Enter (CR
// or LF, a CRLF pair counting once) submits the prompt outside a bracketed
// paste; inside a paste every line break becomes "\n" in the prompt, which is
// how herdr delivers a multi-line prompt followed by a separate Enter. Escape
// sequences other than the paste brackets, such as arrow keys, are dropped.
// It holds state across calls because a read may end in the middle of an
// escape sequence or a CRLF pair.
type lineAssembler struct {
	buf     []byte
	pasting bool
	// esc holds an escape sequence that is not complete yet; nil when none.
	esc []byte
	// afterCR is set when the previous byte was CR, so that the LF of a CRLF
	// pair neither submits a second, empty prompt nor doubles a line break.
	afterCR bool
}

// feed consumes data up to and including the first event, and returns that
// event, the bytes to echo to the terminal (a raw terminal echoes nothing by
// itself) and how many bytes of data it consumed. The caller feeds the rest
// again, after it has acted on the event.
func (l *lineAssembler) feed(data []byte) (inputEvent, string, int) {
	var echo []byte
	for i := 0; i < len(data); i++ {
		b := data[i]
		afterCR := l.afterCR
		l.afterCR = b == keyCR

		if l.esc != nil {
			l.esc = append(l.esc, b)
			if escapeDone(l.esc) {
				l.finishEscape()
			}
			continue
		}
		if b == keyEsc {
			l.esc = []byte{keyEsc}
			continue
		}
		if l.pasting {
			switch {
			case b == keyLF && afterCR:
			case b == keyCR || b == keyLF:
				l.buf = append(l.buf, '\n')
				echo = append(echo, '\n')
			default:
				l.buf = append(l.buf, b)
				echo = append(echo, b)
			}
			continue
		}
		switch b {
		case keyLF, keyCR:
			if b == keyLF && afterCR {
				continue
			}
			text := string(l.buf)
			l.buf = l.buf[:0]
			return inputEvent{Kind: inputSubmit, Text: text}, string(append(echo, '\n')), i + 1
		case keyCtrlC:
			l.buf = l.buf[:0]
			return inputEvent{Kind: inputInterrupt}, string(echo), i + 1
		case keyCtrlD:
			if len(l.buf) == 0 {
				return inputEvent{Kind: inputEOF}, string(echo), i + 1
			}
		case keyBackspace, keyDelete:
			if len(l.buf) > 0 {
				_, size := utf8.DecodeLastRune(l.buf)
				l.buf = l.buf[:len(l.buf)-size]
				echo = append(echo, "\b \b"...)
			}
		default:
			if b < 0x20 && b != keyTab {
				continue
			}
			l.buf = append(l.buf, b)
			echo = append(echo, b)
		}
	}
	return inputEvent{}, string(echo), len(data)
}

// finishEscape acts on the complete escape sequence in l.esc.
func (l *lineAssembler) finishEscape() {
	switch string(l.esc[1:]) {
	case pasteStart:
		l.pasting = true
	case pasteEnd:
		l.pasting = false
	}
	l.esc = nil
}

// escapeDone reports whether seq, which starts with ESC, is a complete
// escape sequence (or too long to be one).
func escapeDone(seq []byte) bool {
	if len(seq) >= maxEscapeLen {
		return true
	}
	if len(seq) < 2 {
		return false
	}
	switch seq[1] {
	case '[':
		// CSI: parameter and intermediate bytes, then a final byte in
		// 0x40-0x7e.
		last := seq[len(seq)-1]
		return len(seq) > 2 && last >= 0x40 && last <= 0x7e
	case 'O':
		// SS3, as sent by F1-F4 and by arrows in application mode.
		return len(seq) >= 3
	}
	return true
}

// keyLen returns how many bytes of data make up its first key press: a whole
// escape sequence, one UTF-8 character, or one byte. It is how a dialog takes
// exactly one key and leaves what was typed ahead for the prompt.
func keyLen(data []byte) int {
	if len(data) == 0 {
		return 0
	}
	if data[0] == keyEsc {
		for n := 2; n <= len(data); n++ {
			if escapeDone(data[:n]) {
				return n
			}
		}
		return len(data)
	}
	if _, size := utf8.DecodeRune(data); size > 0 {
		return size
	}
	return 1
}
