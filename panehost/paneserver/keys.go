package paneserver

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fleetd/fleetd/herdr"
)

const (
	bracketedPasteStart = "\x1b[200~"
	bracketedPasteEnd   = "\x1b[201~"
	enterKey            = "\r"
)

// namedKeys maps herdr's key names to the bytes a terminal sends for them.
// Like herdr, there is no home, end, pageup, pagedown, delete or insert.
var namedKeys = map[string]string{
	"enter":     enterKey,
	"return":    enterKey,
	"tab":       "\t",
	"backtab":   "\x1b[Z",
	"shift+tab": "\x1b[Z",
	"esc":       "\x1b",
	"escape":    "\x1b",
	"backspace": "\x7f",
	"space":     " ",
	"plus":      "+",
	"f1":        "\x1bOP",
	"f2":        "\x1bOQ",
	"f3":        "\x1bOR",
	"f4":        "\x1bOS",
	"f5":        "\x1b[15~",
	"f6":        "\x1b[17~",
	"f7":        "\x1b[18~",
	"f8":        "\x1b[19~",
	"f9":        "\x1b[20~",
	"f10":       "\x1b[21~",
	"f11":       "\x1b[23~",
	"f12":       "\x1b[24~",
}

// cursorKeys are the keys whose encoding depends on the cursor keys mode
// (DECCKM) the program set: the final byte after CSI or SS3.
var cursorKeys = map[string]byte{
	"up":    'A',
	"down":  'B',
	"right": 'C',
	"left":  'D',
}

// encodeKey returns the bytes for a key name such as "enter", "ctrl+c",
// "C-c", "alt+b", "up" or a single character.
func encodeKey(name string, modes inputModes) (string, error) {
	key := strings.TrimSpace(name)
	if utf8.RuneCountInString(key) == 1 {
		return key, nil
	}
	lower := strings.ToLower(key)
	if seq, ok := namedKeys[lower]; ok {
		return seq, nil
	}
	if final, ok := cursorKeys[lower]; ok {
		if modes.cursorKeys {
			return "\x1bO" + string(final), nil
		}
		return "\x1b[" + string(final), nil
	}
	if rest, ok := cutPrefixFold(key, "ctrl+", "c-"); ok {
		if seq, ok := controlKey(rest); ok {
			return seq, nil
		}
	}
	if rest, ok := cutPrefixFold(key, "alt+", "m-"); ok {
		if seq, err := encodeKey(rest, modes); err == nil {
			return "\x1b" + seq, nil
		}
	}
	return "", fmt.Errorf("unsupported key %s", name)
}

// controlKey encodes ctrl with a letter or one of @[\]^_ and space.
func controlKey(key string) (string, bool) {
	key = strings.ToLower(key)
	if key == "space" {
		return "\x00", true
	}
	if len(key) != 1 {
		return "", false
	}
	c := key[0]
	switch {
	case c >= 'a' && c <= 'z':
		return string(rune(c - 'a' + 1)), true
	case c >= '@' && c <= '_':
		return string(rune(c - '@')), true
	}
	return "", false
}

func cutPrefixFold(s string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if len(s) > len(p) && strings.EqualFold(s[:len(p)], p) {
			return s[len(p):], true
		}
	}
	return "", false
}

// encodeText encodes typed text, as a bracketed paste when the program asked
// for one so that newlines in it do not submit.
func encodeText(text string, modes inputModes) string {
	// Text is text: every control in it but newline and tab is shown, not
	// acted on, as fleetd types messages. An ESC[201~ in it would end the
	// paste early and let the rest run as keys; keys go through keys.
	text = herdr.PlainText(text)
	if text == "" || !modes.bracketedPaste {
		return text
	}
	return bracketedPasteStart + text + bracketedPasteEnd
}
