package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errInterrupted ends the agent when Ctrl-C is pressed at its prompt.
var errInterrupted = errors.New("interrupted")

// errTurnInterrupted ends a turn when Ctrl-C is pressed during it, as an
// agent CLI's interrupt key does; the agent goes back to its prompt.
var errTurnInterrupted = errors.New("turn interrupted")

// exitError ends the agent with a chosen exit status, for the crash and exit
// directives.
type exitError struct {
	code int
}

// Error says which status the agent exits with.
func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// reportTimeout bounds one status report, so that a wedged herdr cannot
// stall a turn for ever.
const reportTimeout = 5 * time.Second

// agent is the scripted agent: it reads prompts, runs their directives and
// tells herdr what it is doing.
type agent struct {
	// out is the terminal.
	out io.Writer
	// status receives the agent's state changes.
	status statusReporter
	// gateway is fleetd's MCP gateway; nil when none is configured, and then
	// replies and questions are printed but not sent.
	gateway *gateway
	// received records every prompt; nil when not recording.
	received *receivedLog
	// prompt is shown whenever the agent waits for input.
	prompt string
	// echo is set on a raw terminal, which shows nothing that is typed
	// unless the program writes it back.
	echo bool

	turns int
}

// run shows the prompt and runs one turn per submitted prompt until the input
// ends (nil), Ctrl-C is pressed (errInterrupted), a directive exits
// (*exitError) or ctx ends.
func (a *agent) run(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Ctrl-C ends the turn in progress, or the agent when none is.
	var inTurn atomic.Pointer[context.CancelCauseFunc]
	kb := startKeyboard(ctx, in, func() bool {
		if endTurn := inTurn.Load(); endTurn != nil {
			(*endTurn)(errTurnInterrupted)
			return true
		}
		cancel(errInterrupted)
		return false
	})

	var asm lineAssembler
	a.showPrompt()
	a.report(ctx, stateIdle, "")
	for {
		data, err := kb.read(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ev, echo, n := asm.feed(data)
		kb.unread(data[n:])
		if a.echo {
			a.print(echo)
		}
		switch ev.Kind {
		case inputSubmit:
			if !a.echo {
				a.print("\n")
			}
			if strings.TrimSpace(ev.Text) == "" {
				a.showPrompt()
				continue
			}
			tctx, endTurn := context.WithCancelCause(ctx)
			inTurn.Store(&endTurn)
			err := a.turn(tctx, ev.Text, kb)
			inTurn.Store(nil)
			endTurn(nil)
			if errors.Is(err, errTurnInterrupted) {
				a.printf("^C the turn was interrupted\n")
				err = nil
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			a.showPrompt()
			a.report(ctx, stateIdle, "")
		case inputInterrupt:
			return errInterrupted
		case inputEOF:
			if a.echo {
				a.print("\n")
			}
			return nil
		}
	}
}

// turn runs one prompt. It returns an error only when the agent must stop.
func (a *agent) turn(ctx context.Context, text string, kb *keyboard) error {
	a.turns++
	if a.received != nil {
		if err := a.received.record(a.turns, text, time.Now()); err != nil {
			a.printf("! %v\n", err)
		}
	}
	a.report(ctx, stateWorking, "")
	a.printf("[turn %d] working\n", a.turns)

	p, err := parsePlan(text)
	if err != nil {
		a.printf("! this prompt cannot run:\n%v\n", err)
		return nil
	}
	var (
		answer string
		asked  bool
	)
	for _, s := range p.Steps {
		arg := s.Text
		if asked {
			arg = strings.ReplaceAll(arg, answerPlaceholder, answer)
		}
		switch s.Kind {
		case stepReply:
			a.reply(ctx, arg)
		case stepAsk:
			got, ok := a.ask(ctx, arg)
			if !ok {
				// What follows depends on the answer; going on without one
				// would send a reply the test did not script.
				a.printf("   the rest of this prompt is skipped\n")
				return context.Cause(ctx)
			}
			answer, asked = got, true
			if s.ReplyWithAnswer {
				a.reply(ctx, answer)
			}
		case stepSilent:
			a.printf("%s\n", arg)
		case stepSleep:
			a.printf("-> sleep %s\n", s.Duration)
			timer := time.NewTimer(s.Duration)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
		case stepDialog:
			if err := a.dialog(ctx, arg, kb); err != nil {
				return err
			}
		case stepCrash:
			a.printf("-> crash: exiting with status %d\n", s.Code)
			return &exitError{code: s.Code}
		case stepExit:
			a.printf("-> exit: exiting with status %d\n", s.Code)
			return &exitError{code: s.Code}
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	a.printf("[turn %d] done\n", a.turns)
	return nil
}

// reply sends content with bridge_reply and prints how that went.
func (a *agent) reply(ctx context.Context, content string) {
	a.printf("-> %s: %s\n", toolReply, content)
	if _, ok := a.call(ctx, toolReply, content); ok {
		a.printf("   sent\n")
	}
}

// ask sends question with bridge_ask, waits for the answer and prints it.
// ok is false when there is no answer.
func (a *agent) ask(ctx context.Context, question string) (answer string, ok bool) {
	a.printf("-> %s: %s\n", toolAsk, question)
	a.printf("   waiting for the answer\n")
	res, ok := a.call(ctx, toolAsk, question)
	if !ok {
		return "", false
	}
	answer, err := answerOf(res)
	if err != nil {
		a.printf("   ! %v\n", err)
		return "", false
	}
	a.printf("   answer: %s\n", answer)
	return answer, true
}

// call calls a gateway tool whose only argument is content, and prints any
// failure. ok is true when the tool succeeded.
func (a *agent) call(ctx context.Context, tool, content string) (*mcp.CallToolResult, bool) {
	if a.gateway == nil {
		a.printf("   ! not sent: no gateway configured (FLEETD_MCP_URL is unset)\n")
		return nil, false
	}
	res, err := a.gateway.callTool(ctx, tool, map[string]any{"content": content})
	if err != nil {
		a.printf("   ! %v\n", err)
		return nil, false
	}
	if res.IsError {
		a.printf("   ! %s refused: %s\n", tool, describeToolError(res))
		return nil, false
	}
	return res, true
}

// dialog shows a blocking dialog and waits for one key, as an agent asking
// for approval does; herdr sees the agent blocked meanwhile.
func (a *agent) dialog(ctx context.Context, text string, kb *keyboard) error {
	a.printf("\n+-- dialog ------------------------\n| %s\n+-- press any key to continue ----\n", text)
	a.report(ctx, stateBlocked, text)
	data, err := kb.read(ctx)
	if err != nil {
		return err
	}
	n := keyLen(data)
	kb.unread(data[n:])
	if bytes.Equal(data[:n], []byte{keyCtrlC}) {
		return errInterrupted
	}
	a.printf("   key %q pressed\n", data[:n])
	a.report(ctx, stateWorking, "")
	return nil
}

// showPrompt shows that the agent waits for input.
func (a *agent) showPrompt() {
	a.print(a.prompt)
}

// report tells herdr the agent's state. A failed report is printed, not
// fatal: the agent still works, herdr just sees less of it.
func (a *agent) report(ctx context.Context, state, message string) {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	if err := a.status.Report(ctx, state, message); err != nil {
		a.printf("! reporting %s: %v\n", state, err)
	}
}

func (a *agent) print(s string) {
	_, _ = io.WriteString(a.out, s)
}

func (a *agent) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.out, format, args...)
}

// keyboard hands out what is typed into the pane. A reader goroutine reads
// ahead, so that Ctrl-C interrupts even while a turn is busy; bytes that one
// consumer does not use are kept for the next.
type keyboard struct {
	chunks <-chan readResult
	ahead  []byte
	err    error
}

// readResult is one read from the input.
type readResult struct {
	data []byte
	err  error
}

// startKeyboard starts reading in. interrupt is called as soon as a lone
// Ctrl-C arrives, which is how a terminal delivers the key.
func startKeyboard(ctx context.Context, in io.Reader, interrupt func() (consumed bool)) *keyboard {
	chunks := make(chan readResult)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				data := bytes.Clone(buf[:n])
				if n == 1 && data[0] == keyCtrlC && interrupt() {
					// It ended a turn: it is no input for the prompt.
					continue
				}
				select {
				case chunks <- readResult{data: data}:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				select {
				case chunks <- readResult{err: err}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	return &keyboard{chunks: chunks}
}

// read returns the bytes typed ahead, or waits for the next read.
func (k *keyboard) read(ctx context.Context) ([]byte, error) {
	if len(k.ahead) > 0 {
		data := k.ahead
		k.ahead = nil
		return data, nil
	}
	if k.err != nil {
		return nil, k.err
	}
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case r := <-k.chunks:
		if r.err != nil {
			k.err = r.err
			return nil, r.err
		}
		return r.data, nil
	}
}

// unread keeps data for the next read.
func (k *keyboard) unread(data []byte) {
	if len(data) > 0 {
		k.ahead = append(data[:len(data):len(data)], k.ahead...)
	}
}

// receivedLog appends every prompt the agent received to a file, one JSON
// object a line, so that tests can count exactly what reached the agent.
type receivedLog struct {
	path string
}

// receivedEntry is one line of the received log.
type receivedEntry struct {
	// Seq counts the prompts of this process, from 1.
	Seq int `json:"seq"`
	// Time is when the prompt was submitted.
	Time time.Time `json:"time"`
	// Text is the prompt as submitted, line breaks as "\n".
	Text string `json:"text"`
}

// record appends one prompt.
func (r *receivedLog) record(seq int, text string, now time.Time) error {
	line, err := json.Marshal(receivedEntry{Seq: seq, Time: now.UTC(), Text: text})
	if err != nil {
		return fmt.Errorf("encoding received prompt %d: %w", seq, err)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening received log: %w", err)
	}
	// One write per line, so that a reader never sees half a line.
	_, werr := f.Write(append(line, '\n'))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("writing received log %s: %w", r.path, err)
	}
	return nil
}
