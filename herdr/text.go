package herdr

import (
	"strings"
	"unicode/utf8"
)

// PlainText is s made safe to type into a terminal: every terminal control
// is neutralised, so typed text is only ever text. herdr types what it is
// given as it is (a bracketed paste when the program asked for one), and a
// message could otherwise end the paste early (ESC [201~), submit lines of
// its own (CR), interrupt the agent (^C) or drive the terminal.
//
//   - CR LF and a lone CR become LF: a line break stays a line break
//     inside the paste.
//   - Newline and tab are kept.
//   - Every other C0 control and DEL becomes its Unicode control picture
//     (ESC shows as ␛, ^C as ␃), so a reader still sees that it was there.
//   - C1 controls (U+0080 to U+009F) and bytes that are not UTF-8 become
//     U+FFFD.
//
// Everything else, quotes, $(...), backticks and any other script, is kept
// exactly. Client.AgentPrompt and Client.PaneSendInput apply it to every
// text they type; keys are sent with pane.send_keys, never as text.
func PlainText(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\r':
			b.WriteByte('\n')
			if i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case r == 0x7f:
			b.WriteRune('\u2421')
		case r >= 0x80 && r <= 0x9f:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isPlain reports whether s needs no change: valid UTF-8 with no control
// but newline and tab.
func isPlain(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (r >= 0x80 && r <= 0x9f) {
			return false
		}
		i += size
	}
	return true
}

// ReadableText is terminal output made plain for a reader: escape
// sequences (CSI, OSC, and the two-byte ones) are removed, a lone CR ends
// the line, and every other control but newline and tab is dropped. A pane
// read is plain already; this keeps it so whatever a program printed.
func ReadableText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0x1b:
			i += escapeLen(s[i:])
			continue
		case c == '\r':
			if i+1 >= len(s) || s[i+1] != '\n' {
				b.WriteByte('\n')
			}
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if (r == utf8.RuneError && size == 1) || (r >= 0x80 && r <= 0x9f) {
				i += size
				continue
			}
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		i++
	}
	return b.String()
}

// escapeLen is the length of the escape sequence at the start of s (which
// starts with ESC): CSI up to its final byte, OSC, DCS, SOS, PM and APC up
// to their terminator (BEL or ESC \), any other up to the byte after ESC.
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[':
		for i := 2; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
		}
		return len(s)
	case ']', 'P', 'X', '^', '_':
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	return 2
}
