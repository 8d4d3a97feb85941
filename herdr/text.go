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
