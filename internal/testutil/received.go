package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ParseReceived is the prompts in a scripted agent's received log
// (scripted-agent --received-log): one JSON object a line, the prompt's
// text in "text", in the order the agent received them.
func ParseReceived(log []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var entry struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			return nil, fmt.Errorf("received log line %q: %w", sc.Text(), err)
		}
		out = append(out, entry.Text)
	}
	return out, sc.Err()
}

// ReadReceived is ParseReceived of the log at path; no file is no prompt.
func ReadReceived(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out, err := ParseReceived(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
