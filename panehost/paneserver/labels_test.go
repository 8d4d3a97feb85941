package paneserver

import "testing"

func TestIdentifyProcess(t *testing.T) {
	cases := map[string]struct {
		argv    []string
		comm    string
		environ []string
		want    string
	}{
		"by name":                {argv: []string{"/usr/local/bin/claude", "--settings", "x"}, comm: "claude", want: "claude"},
		"native binary suffix":   {argv: []string{"claude.exe"}, comm: "claude.exe", want: "claude"},
		"node script":            {argv: []string{"node", "/opt/bin/codex.js", "resume"}, comm: "node", want: "codex"},
		"npm package path":       {argv: []string{"node", "--no-warnings", "/x/node_modules/@openai/codex/bin/run"}, comm: "node", want: "codex"},
		"hint wins":              {argv: []string{"scripted-agent"}, comm: "scripted-agent", environ: []string{"A=1", "HERDR_AGENT=claude"}, want: "claude"},
		"alias":                  {argv: []string{"qwen-code"}, comm: "qwen-code", want: "qwen"},
		"a shell is no agent":    {argv: []string{"/bin/sh"}, comm: "sh", want: ""},
		"an exiting process":     {argv: nil, comm: "sh", want: ""},
		"an unknown script host": {argv: []string{"python3", "tool.py"}, comm: "python3", want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := identifyProcess(tc.argv, tc.comm, tc.environ); got != tc.want {
				t.Errorf("identifyProcess(%q, %q) = %q, want %q", tc.argv, tc.comm, got, tc.want)
			}
		})
	}
	if got := publicNumber(10); got != "A" {
		t.Errorf("publicNumber(10) = %q, want herdr's A", got)
	}
	if got := publicNumber(33); got != "11" {
		t.Errorf("publicNumber(33) = %q, want herdr's 11", got)
	}
}
